#include "meshtrain/kernels/cpu/gemm_general.h"

#include <cblas.h>
#include <omp.h>

#include <cstring>

#include "meshtrain/kernels/cpu/gemm_bf16.h"
#include "meshtrain/kernels/cpu/matmul.h"

namespace meshtrain::cpu {

void dgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha,
           const double* A, int64_t lda, const double* B, int64_t ldb, double beta, double* C,
           int64_t ldc) {
  if (M == 0 || N == 0) return;
  cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, static_cast<blasint>(M),
              static_cast<blasint>(N), static_cast<blasint>(K), alpha, A,
              static_cast<blasint>(lda), B, static_cast<blasint>(ldb), beta, C,
              static_cast<blasint>(ldc));
}

void gemm_half_general(HalfFormat fmt, bool trans_a, bool trans_b, int64_t M, int64_t N,
                       int64_t K, float alpha, const uint16_t* A, int64_t lda, const uint16_t* B,
                       int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  gemm_half(fmt, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void sgemm_strided_batched(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                           float alpha, const float* A, int64_t lda, int64_t stride_a,
                           const float* B, int64_t ldb, int64_t stride_b, float beta, float* C,
                           int64_t ldc, int64_t stride_c, int64_t batch) {
  if (M == 0 || N == 0 || batch == 0) return;
  const int threads = static_cast<int>(std::min<int64_t>(omp_get_max_threads(), batch));
  // Inside the parallel region each sgemm runs on its caller's thread.
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (int64_t i = 0; i < batch; ++i)
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, static_cast<blasint>(M),
                static_cast<blasint>(N), static_cast<blasint>(K), alpha, A + i * stride_a,
                static_cast<blasint>(lda), B + i * stride_b, static_cast<blasint>(ldb), beta,
                C + i * stride_c, static_cast<blasint>(ldc));
}

void copy_2d(void* dst, int64_t dst_pitch, const void* src, int64_t src_pitch, int64_t row_bytes,
             int64_t rows) {
  if (row_bytes == dst_pitch && row_bytes == src_pitch) {
    std::memcpy(dst, src, static_cast<size_t>(row_bytes * rows));
    return;
  }
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(static_cast<char*>(dst) + r * dst_pitch,
                static_cast<const char*>(src) + r * src_pitch, static_cast<size_t>(row_bytes));
}

}  // namespace meshtrain::cpu
