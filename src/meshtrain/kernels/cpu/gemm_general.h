// General GEMMs beyond the model's f32 products: f64, 16-bit operands into an
// f32 result at any leading dimension, many equal-shaped products at fixed
// strides, and a pitched 2D copy. The distributed matrix multiply (linalg/)
// runs its local work through these (kernel_table.h: dgemm, gemm_half,
// sgemm_strided_batched, copy_2d). Row-major, BLAS leading dimensions.
#pragma once
#include <cstdint>

#include "meshtrain/core/half.h"

namespace meshtrain::cpu {

// C (M, N) = alpha op(A) op(B) + beta C on OpenBLAS.
void dgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha,
           const double* A, int64_t lda, const double* B, int64_t ldb, double beta, double* C,
           int64_t ldc);

// gemm_bf16.h's gemm_half under the kernel table's argument order.
void gemm_half_general(HalfFormat fmt, bool trans_a, bool trans_b, int64_t M, int64_t N,
                       int64_t K, float alpha, const uint16_t* A, int64_t lda, const uint16_t* B,
                       int64_t ldb, float beta, float* C, int64_t ldc);

// `batch` products C_i = alpha op(A_i) op(B_i) + beta C_i with
// X_i = X + i * stride_x. The batch is split over the OpenMP threads, each
// product single-threaded: small products are dominated by per-call setup,
// which then runs in parallel too.
void sgemm_strided_batched(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                           float alpha, const float* A, int64_t lda, int64_t stride_a,
                           const float* B, int64_t ldb, int64_t stride_b, float beta, float* C,
                           int64_t ldc, int64_t stride_c, int64_t batch);

// `rows` rows of `row_bytes` each from src (rows `src_pitch` bytes apart) to
// dst (`dst_pitch` apart): packing a panel of a matrix for a transfer.
void copy_2d(void* dst, int64_t dst_pitch, const void* src, int64_t src_pitch, int64_t row_bytes,
             int64_t rows);

}  // namespace meshtrain::cpu
