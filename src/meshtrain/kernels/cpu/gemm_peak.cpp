#include "meshtrain/kernels/cpu/gemm_peak.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "meshtrain/core/half.h"
#include "meshtrain/kernels/cpu/gemm_bf16.h"
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

double measure_bf16_gemm_gflops(int n, int reps) {
  if (bf16_gemm_path() != HalfGemmPath::OneDnnBf16) return measure_sgemm_gflops(n, reps);
  std::vector<uint16_t> a(static_cast<size_t>(n) * n, f32_to_bf16(0.5f)),
      b(a.size(), f32_to_bf16(0.25f));
  std::vector<float> c(a.size(), 0.f);
  auto run = [&] {
    gemm_half(Half::BF16, false, true, n, n, n, 1.f, a.data(), n, b.data(), n, 0.f, c.data(), n);
  };
  run();  // warm-up (and oneDNN's kernel generation)
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    run();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return 2.0 * n * n * static_cast<double>(n) / best / 1e9;
}

}  // namespace meshtrain::cpu
