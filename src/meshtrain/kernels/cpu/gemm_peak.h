// Measures this process's single-precision GEMM rate with its current thread
// count: the "peak" that CPU MFU is quoted against.
#pragma once

namespace meshtrain::cpu {

// Best GFLOP/s over a few repetitions of an n x n x n sgemm.
double measure_sgemm_gflops(int n = 1024, int reps = 5);

}  // namespace meshtrain::cpu
