// One column-major GEMM entry for every matrix product of the CUDA backend:
// D = alpha op(A) op(B) + beta C (+ bias[row] on every column), C = D in
// place, f32 result, A and B f32 or 16-bit (bf16/f16) with f32 accumulation
// (CUBLAS_COMPUTE_32F: no TF32, so f32 results match a CPU BLAS to f32
// rounding). Runs on cuBLASLt (bias fused through the BIAS epilogue); where
// cuBLASLt offers no algorithm, on cublasGemmEx with the bias added after.
// CUDA-only header.
#pragma once
#include <library_types.h>

#include <cstdint>

#include "meshtrain/core/half.h"
#include "meshtrain/core/stream.h"

namespace meshtrain::cuda {

inline cudaDataType_t cuda_type_of(HalfFormat fmt) {
  return fmt == HalfFormat::BF16 ? CUDA_R_16BF : CUDA_R_16F;
}

// Column-major, BLAS argument order: op(A) is m x k, op(B) k x n, C m x n.
// bias (m floats) may be null.
void gemm_colmajor(Stream s, cudaDataType_t ab_type, bool trans_a, bool trans_b, int64_t m,
                   int64_t n, int64_t k, float alpha, const void* A, int64_t lda, const void* B,
                   int64_t ldb, float beta, float* C, int64_t ldc, const float* bias);

// Row-major (like cblas with CblasRowMajor): C (M, N) = alpha op(A) op(B) + beta C.
void gemm_rowmajor(Stream s, cudaDataType_t ab_type, bool trans_a, bool trans_b, int64_t M,
                   int64_t N, int64_t K, float alpha, const void* A, int64_t lda, const void* B,
                   int64_t ldb, float beta, float* C, int64_t ldc);

// Row-major f64 GEMM and strided-batched f32 GEMM on cuBLAS.
void dgemm_rowmajor(Stream s, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                    double alpha, const double* A, int64_t lda, const double* B, int64_t ldb,
                    double beta, double* C, int64_t ldc);
void sgemm_strided_batched_rowmajor(Stream s, bool trans_a, bool trans_b, int64_t M, int64_t N,
                                    int64_t K, float alpha, const float* A, int64_t lda,
                                    int64_t stride_a, const float* B, int64_t ldb,
                                    int64_t stride_b, float beta, float* C, int64_t ldc,
                                    int64_t stride_c, int64_t batch);

}  // namespace meshtrain::cuda
