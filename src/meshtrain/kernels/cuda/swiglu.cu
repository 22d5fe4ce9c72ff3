// SwiGLU: out = silu(gate) * up, gate_up rows (gate H | up H), as
// kernels/cpu/swiglu.cpp.
#include "meshtrain/kernels/cuda/activations.h"
#include "meshtrain/kernels/cuda/cuda_common.cuh"

namespace meshtrain::cuda {

namespace {

__global__ void swiglu_forward_kernel(float* out, const float* gate_up, int64_t N, int64_t H) {
  const int64_t total = N * H;
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < total;
       idx += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = idx / H, j = idx % H;
    const float g = gate_up[i * 2 * H + j], u = gate_up[i * 2 * H + H + j];
    out[idx] = g / (1.0f + expf(-g)) * u;
  }
}

__global__ void swiglu_backward_kernel(float* dgate_up, const float* dout, const float* gate_up,
                                       int64_t N, int64_t H) {
  const int64_t total = N * H;
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < total;
       idx += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = idx / H, j = idx % H;
    const float g = gate_up[i * 2 * H + j], u = gate_up[i * 2 * H + H + j];
    const float d = dout[idx];
    const float sg = 1.0f / (1.0f + expf(-g));
    dgate_up[i * 2 * H + H + j] = d * (g * sg);
    dgate_up[i * 2 * H + j] = d * u * sg * (1.0f + g * (1.0f - sg));
  }
}

}  // namespace

void swiglu_forward(Stream s, float* out, const float* gate_up, int64_t N, int64_t H) {
  if (N <= 0 || H <= 0) return;
  swiglu_forward_kernel<<<blocks_for(N * H), kThreads, 0, stream_of(s)>>>(out, gate_up, N, H);
  MT_CUDA_CHECK_LAUNCH("swiglu_forward");
}

void swiglu_backward(Stream s, float* dgate_up, const float* dout, const float* gate_up,
                     int64_t N, int64_t H) {
  if (N <= 0 || H <= 0) return;
  swiglu_backward_kernel<<<blocks_for(N * H), kThreads, 0, stream_of(s)>>>(dgate_up, dout, gate_up,
                                                                           N, H);
  MT_CUDA_CHECK_LAUNCH("swiglu_backward");
}

}  // namespace meshtrain::cuda
