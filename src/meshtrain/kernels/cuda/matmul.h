// Linear layers and the general GEMM on the GPU (kernel_table.h's matmul_*
// and sgemm entries; semantics of kernels/cpu/matmul.h, matmul_half.h).
// All pointers are device pointers; work is queued on the stream.
#pragma once
#include <cstdint>

#include "meshtrain/core/half.h"
#include "meshtrain/core/stream.h"

namespace meshtrain::cuda {

void matmul_forward(Stream s, float* out, const float* inp, const float* weight, const float* bias,
                    int64_t N, int64_t C, int64_t OC, bool accumulate);
void matmul_backward(Stream s, float* dinp, float* dweight, float* dbias, const float* dout,
                     const float* inp, const float* weight, int64_t N, int64_t C, int64_t OC,
                     bool accumulate_dinp);
void matmul_forward_half(Stream s, HalfFormat fmt, float* out, const uint16_t* inp,
                         const uint16_t* weight, const float* bias, int64_t N, int64_t C,
                         int64_t OC, bool accumulate);
void matmul_backward_half(Stream s, HalfFormat fmt, float* dinp, float* dweight, float* dbias,
                          const float* dout, uint16_t* dout_half, const uint16_t* inp,
                          const uint16_t* weight, int64_t N, int64_t C, int64_t OC,
                          bool accumulate_dinp);
void matmul_backward_weight_half(Stream s, HalfFormat fmt, float* dweight,
                                 const uint16_t* dout_half, const uint16_t* inp, int64_t N,
                                 int64_t C, int64_t OC);
void sgemm(Stream s, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
           const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* Cm,
           int64_t ldc);

void dgemm(Stream s, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha,
           const double* A, int64_t lda, const double* B, int64_t ldb, double beta, double* Cm,
           int64_t ldc);
void gemm_half(Stream s, HalfFormat fmt, bool trans_a, bool trans_b, int64_t M, int64_t N,
               int64_t K, float alpha, const uint16_t* A, int64_t lda, const uint16_t* B,
               int64_t ldb, float beta, float* Cm, int64_t ldc);
void sgemm_strided_batched(Stream s, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                           float alpha, const float* A, int64_t lda, int64_t stride_a,
                           const float* B, int64_t ldb, int64_t stride_b, float beta, float* Cm,
                           int64_t ldc, int64_t stride_c, int64_t batch);

}  // namespace meshtrain::cuda
