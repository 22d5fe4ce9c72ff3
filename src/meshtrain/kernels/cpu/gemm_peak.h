// Measures this process's single-precision GEMM rate with its current thread
// count: the "peak" that CPU MFU is quoted against.
#pragma once

namespace meshtrain::cpu {

// Best GFLOP/s over a few repetitions of an n x n x n sgemm.
double measure_sgemm_gflops(int n = 1024, int reps = 5);

// The same for bf16 GEMMs (gemm_bf16.h): MFU of a bf16 run is quoted against
// this rate, since bf16 dot products reach about twice the sgemm rate. On the
// fallback path (no AVX512_BF16 or no oneDNN) bf16 GEMMs are sgemms after
// widening, so this returns the sgemm rate (and allocates no scratch).
double measure_bf16_gemm_gflops(int n = 1024, int reps = 5);

}  // namespace meshtrain::cpu
