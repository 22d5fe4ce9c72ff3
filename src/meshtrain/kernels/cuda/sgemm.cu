// The general row-major GEMM (LoRA's adapter products) on cuBLASLt, f32
// without TF32: cblas_sgemm(CblasRowMajor, ...) semantics, as the CPU's sgemm.
#include "meshtrain/kernels/cuda/gemm_lt.h"
#include "meshtrain/kernels/cuda/matmul.h"

namespace meshtrain::cuda {

void sgemm(Stream s, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
           const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* Cm,
           int64_t ldc) {
  gemm_rowmajor(s, CUDA_R_32F, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, Cm, ldc);
}

}  // namespace meshtrain::cuda
