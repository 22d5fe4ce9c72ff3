// GELU(x) = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3), in the
// CPU's form (kernels/cpu/gelu.cpp): s = 1 / (exp(2u) + 1), GELU = x (1 - s),
// GELU' = (1 - s)(1 + x s 2u'), 2u clamped to [-80, 80] with NaN kept.
#include "meshtrain/kernels/cuda/activations.h"
#include "meshtrain/kernels/cuda/cuda_common.cuh"

namespace meshtrain::cuda {

namespace {

constexpr float kTwoK = 2.0f * 0.7978845608028654f;  // 2 sqrt(2/pi)
constexpr float kTwoKC = kTwoK * 0.044715f;
constexpr float kTwoKC3 = 3.0f * kTwoKC;
constexpr float kClamp = 80.0f;

__device__ __forceinline__ float gelu_s(float x) {
  float u2 = x * (kTwoK + kTwoKC * x * x);
  u2 = u2 < -kClamp ? -kClamp : (u2 > kClamp ? kClamp : u2);  // comparisons keep NaN
  return 1.0f / (expf(u2) + 1.0f);
}

__global__ void gelu_forward_kernel(float* out, const float* inp, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float x = inp[i];
    out[i] = x * (1.0f - gelu_s(x));
  }
}

__global__ void gelu_backward_kernel(float* dinp, const float* inp, const float* dout, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float x = inp[i];
    const float s = gelu_s(x);
    const float du2 = kTwoK + kTwoKC3 * x * x;
    dinp[i] = dout[i] * ((1.0f - s) * (1.0f + x * s * du2));
  }
}

}  // namespace

void gelu_forward(Stream s, float* out, const float* inp, int64_t n) {
  if (n <= 0) return;
  gelu_forward_kernel<<<blocks_for(n), kThreads, 0, stream_of(s)>>>(out, inp, n);
  MT_CUDA_CHECK_LAUNCH("gelu_forward");
}

void gelu_backward(Stream s, float* dinp, const float* inp, const float* dout, int64_t n) {
  if (n <= 0) return;
  gelu_backward_kernel<<<blocks_for(n), kThreads, 0, stream_of(s)>>>(dinp, inp, dout, n);
  MT_CUDA_CHECK_LAUNCH("gelu_backward");
}

}  // namespace meshtrain::cuda
