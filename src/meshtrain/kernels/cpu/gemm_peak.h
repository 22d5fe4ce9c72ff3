// Measures this process's single-precision GEMM rate with its current thread
// count: the "peak" that CPU MFU is quoted against.
#pragma once

namespace meshtrain::cpu {

// The f32 GEMM rate of each backend (sgemm_backend.h) on an n x n x n NT
// product, best of a few repetitions, the backends interleaved.
struct SgemmPeak {
  double openblas_gflops = 0;
  double onednn_gflops = 0;  // 0 without oneDNN in the build
  double best() const { return openblas_gflops > onednn_gflops ? openblas_gflops : onednn_gflops; }
  const char* best_backend() const { return onednn_gflops > openblas_gflops ? "onednn" : "openblas"; }
};
SgemmPeak measure_sgemm_peak(int n = 1024, int reps = 5);

// The faster backend's rate (measure_sgemm_peak().best()): MFU's denominator,
// whatever MESHTRAIN_SGEMM says, so a run that leaves the faster library
// unused does not look better for it.
double measure_sgemm_gflops(int n = 1024, int reps = 5);

// The same for bf16 GEMMs (gemm_bf16.h): MFU of a bf16 run is quoted against
// this rate, since bf16 dot products reach about twice the sgemm rate. On the
// fallback path (no AVX512_BF16 or no oneDNN) bf16 GEMMs are sgemms after
// widening, so this returns the sgemm rate (and allocates no scratch).
double measure_bf16_gemm_gflops(int n = 1024, int reps = 5);

}  // namespace meshtrain::cpu
