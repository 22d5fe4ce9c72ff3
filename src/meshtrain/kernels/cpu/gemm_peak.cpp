#include "meshtrain/kernels/cpu/gemm_peak.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "meshtrain/core/half.h"
#include "meshtrain/kernels/cpu/gemm_bf16.h"
#include "meshtrain/kernels/cpu/sgemm_backend.h"
#include "meshtrain/kernels/cpu/sgemm_onednn.h"

namespace meshtrain::cpu {

SgemmPeak measure_sgemm_peak(int n, int reps) {
  std::vector<float> a(static_cast<size_t>(n) * n, 0.5f), b(a.size(), 0.25f), c(a.size(), 0.f);
  auto time_one = [&](SgemmBackend be) {
    auto t0 = std::chrono::steady_clock::now();
    sgemm_with(be, false, true, n, n, n, 1.f, a.data(), n, b.data(), n, 0.f, c.data(), n);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  const bool dnn = onednn_sgemm_available();
  time_one(SgemmBackend::OpenBlas);  // warm-up (and oneDNN's kernel generation)
  if (dnn) time_one(SgemmBackend::OneDnn);
  double best_blas = 1e30, best_dnn = 1e30;
  for (int r = 0; r < reps; ++r) {
    best_blas = std::min(best_blas, time_one(SgemmBackend::OpenBlas));
    if (dnn) best_dnn = std::min(best_dnn, time_one(SgemmBackend::OneDnn));
  }
  const double flop = 2.0 * n * n * static_cast<double>(n);
  return SgemmPeak{flop / best_blas / 1e9, dnn ? flop / best_dnn / 1e9 : 0.0};
}

double measure_sgemm_gflops(int n, int reps) { return measure_sgemm_peak(n, reps).best(); }

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
