// The general row-major GEMMs (LoRA's adapter products, the distributed
// multiply's local work): f32 without TF32 and 16-bit operands on cuBLASLt,
// f64 and strided batches on cuBLAS; cblas RowMajor semantics, as the CPU's.
#include "meshtrain/kernels/cuda/gemm_lt.h"
#include "meshtrain/kernels/cuda/matmul.h"

namespace meshtrain::cuda {

void sgemm(Stream s, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
           const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* Cm,
           int64_t ldc) {
  gemm_rowmajor(s, CUDA_R_32F, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, Cm, ldc);
}

void dgemm(Stream s, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha,
           const double* A, int64_t lda, const double* B, int64_t ldb, double beta, double* Cm,
           int64_t ldc) {
  dgemm_rowmajor(s, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, Cm, ldc);
}

void gemm_half(Stream s, HalfFormat fmt, bool trans_a, bool trans_b, int64_t M, int64_t N,
               int64_t K, float alpha, const uint16_t* A, int64_t lda, const uint16_t* B,
               int64_t ldb, float beta, float* Cm, int64_t ldc) {
  gemm_rowmajor(s, cuda_type_of(fmt), trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, Cm,
                ldc);
}

void sgemm_strided_batched(Stream s, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                           float alpha, const float* A, int64_t lda, int64_t stride_a,
                           const float* B, int64_t ldb, int64_t stride_b, float beta, float* Cm,
                           int64_t ldc, int64_t stride_c, int64_t batch) {
  sgemm_strided_batched_rowmajor(s, trans_a, trans_b, M, N, K, alpha, A, lda, stride_a, B, ldb,
                                 stride_b, beta, Cm, ldc, stride_c, batch);
}

}  // namespace meshtrain::cuda
