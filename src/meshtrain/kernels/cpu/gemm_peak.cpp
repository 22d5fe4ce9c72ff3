#include "meshtrain/kernels/cpu/gemm_peak.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "meshtrain/kernels/cpu/matmul.h"

namespace meshtrain::cpu {

double measure_sgemm_gflops(int n, int reps) {
  std::vector<float> a(static_cast<size_t>(n) * n, 0.5f), b(a.size(), 0.25f), c(a.size(), 0.f);
  sgemm(false, true, n, n, n, 1.f, a.data(), n, b.data(), n, 0.f, c.data(), n);  // warm-up
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    sgemm(false, true, n, n, n, 1.f, a.data(), n, b.data(), n, 0.f, c.data(), n);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return 2.0 * n * n * static_cast<double>(n) / best / 1e9;
}

}  // namespace meshtrain::cpu
