// Linear layers on cuBLASLt (gemm_lt.h). Row-major (N, C) inputs, (OC, C)
// weights and (N, OC) outputs are column-major (C, N), (C, OC) and (OC, N):
//   out^T (OC, N)     = gemm(T, N, m=OC, n=N, k=C, W, inp)
//   dinp^T (C, N)     = gemm(N, N, m=C, n=N, k=OC, W, dout)
//   dweight^T (C, OC) += gemm(N, T, m=C, n=OC, k=N, inp, dout)
// The bias (OC values, one per column-major row) goes through the epilogue.
#include "meshtrain/kernels/cuda/matmul.h"

#include "meshtrain/kernels/cuda/colsum.cuh"
#include "meshtrain/kernels/cuda/elementwise.h"
#include "meshtrain/kernels/cuda/gemm_lt.h"

namespace meshtrain::cuda {

namespace {

void linear_forward(Stream s, cudaDataType_t ab, float* out, const void* inp, const void* weight,
                    const float* bias, int64_t N, int64_t C, int64_t OC, bool accumulate) {
  gemm_colmajor(s, ab, true, false, OC, N, C, 1.0f, weight, C, inp, C, accumulate ? 1.0f : 0.0f,
                out, OC, bias);
}

void linear_dinp(Stream s, cudaDataType_t ab, float* dinp, const void* dout, const void* weight,
                 int64_t N, int64_t C, int64_t OC, bool accumulate) {
  gemm_colmajor(s, ab, false, false, C, N, OC, 1.0f, weight, C, dout, OC, accumulate ? 1.0f : 0.0f,
                dinp, C, nullptr);
}

void linear_dweight(Stream s, cudaDataType_t ab, float* dweight, const void* dout, const void* inp,
                    int64_t N, int64_t C, int64_t OC) {
  gemm_colmajor(s, ab, false, true, C, OC, N, 1.0f, inp, C, dout, OC, 1.0f, dweight, C, nullptr);
}

void bias_grad(Stream s, float* dbias, const float* dout, int64_t N, int64_t OC) {
  periodic_colsum(stream_of(s), dbias, ReadMatrix{dout, OC}, N, OC, 1);
}

}  // namespace

void matmul_forward(Stream s, float* out, const float* inp, const float* weight, const float* bias,
                    int64_t N, int64_t C, int64_t OC, bool accumulate) {
  linear_forward(s, CUDA_R_32F, out, inp, weight, bias, N, C, OC, accumulate);
}

void matmul_backward(Stream s, float* dinp, float* dweight, float* dbias, const float* dout,
                     const float* inp, const float* weight, int64_t N, int64_t C, int64_t OC,
                     bool accumulate_dinp) {
  if (dinp) linear_dinp(s, CUDA_R_32F, dinp, dout, weight, N, C, OC, accumulate_dinp);
  if (dweight) linear_dweight(s, CUDA_R_32F, dweight, dout, inp, N, C, OC);
  if (dbias) bias_grad(s, dbias, dout, N, OC);
}

void matmul_forward_half(Stream s, HalfFormat fmt, float* out, const uint16_t* inp,
                         const uint16_t* weight, const float* bias, int64_t N, int64_t C,
                         int64_t OC, bool accumulate) {
  linear_forward(s, cuda_type_of(fmt), out, inp, weight, bias, N, C, OC, accumulate);
}

void matmul_backward_half(Stream s, HalfFormat fmt, float* dinp, float* dweight, float* dbias,
                          const float* dout, uint16_t* dout_half, const uint16_t* inp,
                          const uint16_t* weight, int64_t N, int64_t C, int64_t OC,
                          bool accumulate_dinp) {
  if (dinp || dweight) {
    // As on the CPU: dout rounded once into the caller's dout_half (scratch
    // of our own when the caller passes none).
    Scratch own(dout_half ? 0 : sizeof(uint16_t) * N * OC, stream_of(s));
    uint16_t* dh = dout_half ? dout_half : own.as<uint16_t>();
    to_half(s, fmt, dout, dh, N * OC);
    if (dinp) linear_dinp(s, cuda_type_of(fmt), dinp, dh, weight, N, C, OC, accumulate_dinp);
    if (dweight) linear_dweight(s, cuda_type_of(fmt), dweight, dh, inp, N, C, OC);
  }
  if (dbias) bias_grad(s, dbias, dout, N, OC);
}

void matmul_backward_weight_half(Stream s, HalfFormat fmt, float* dweight,
                                 const uint16_t* dout_half, const uint16_t* inp, int64_t N,
                                 int64_t C, int64_t OC) {
  linear_dweight(s, cuda_type_of(fmt), dweight, dout_half, inp, N, C, OC);
}

}  // namespace meshtrain::cuda
