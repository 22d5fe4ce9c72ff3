// The local pieces every distributed algorithm runs, on the context device's
// kernel table: one GEMM by dtype (f64: dgemm; f32: sgemm; bf16 operands:
// gemm_half into an f32 result), packing a panel, scaling C by beta; and the
// timing the benchmark reports (local GEMM, waiting for transfers, packing).
#pragma once
#include <chrono>
#include <cstdint>

#include "meshtrain/comm/work.h"
#include "meshtrain/core/dtype.h"
#include "meshtrain/linalg/process_grid.h"

namespace meshtrain::linalg {

// C's dtype for operands of `ab`: bf16 products accumulate into f32.
DType result_dtype(DType ab);

// Seconds spent per kind of work by this rank during one distributed call.
struct GemmTimes {
  double local_gemm_s = 0, wait_s = 0, pack_s = 0, total_s = 0;
  // Multiplies during which the next transfer was already under way (the
  // look-ahead at work: a transfer started by the progress engine, or done).
  int64_t multiplies = 0, overlapped = 0;
};

// C (M, N; dtype result_dtype(ab)) = alpha op(A) op(B) + beta C, row-major.
void local_gemm(const Context& ctx, DType ab, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                double alpha, const void* A, int64_t lda, const void* B, int64_t ldb, double beta,
                void* C, int64_t ldc, GemmTimes& times);
// `rows` x `cols` elements of `esz` bytes from src (leading dimension
// ld_src) to the dense dst.
void pack(const Context& ctx, void* dst, const void* src, int64_t ld_src, int64_t rows,
          int64_t cols, size_t esz, GemmTimes& times);
// C (rows x cols, leading dimension ld, dtype t) *= beta; beta 0 clears
// (no NaN carried from the old contents, as BLAS).
void scale(void* C, DType t, int64_t rows, int64_t cols, int64_t ld, double beta);
// Waits for a transfer, counting the time as exposed communication.
void wait(const comm::Work& w, GemmTimes& times);
// After a multiply: counts it, and as overlapped when `ahead` and the next
// step's transfers (a, b) had begun by its end.
void count_overlap(GemmTimes& times, bool has_next, const comm::Work& a, const comm::Work& b,
                   bool ahead);

using GemmClock = std::chrono::steady_clock;
inline double seconds_since(GemmClock::time_point t0) {
  return std::chrono::duration<double>(GemmClock::now() - t0).count();
}

}  // namespace meshtrain::linalg
