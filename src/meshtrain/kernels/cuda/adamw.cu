// The fused AdamW step, kernels/cpu/adamw.cpp's formula in f32; the bias
// corrections computed on the host exactly as the CPU does.
#include <cmath>

#include "meshtrain/kernels/cuda/cuda_common.cuh"
#include "meshtrain/kernels/cuda/elementwise.h"

namespace meshtrain::cuda {

namespace {

struct AdamWArgs {
  float b1, b2, lr, wd, eps, gs, inv_bc1, inv_bc2;
};

__global__ void adamw_kernel(float* param, const float* grad, float* m, float* v, int64_t n,
                             AdamWArgs a) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float g = grad[i] * a.gs;
    const float mi = a.b1 * m[i] + (1.0f - a.b1) * g;
    const float vi = a.b2 * v[i] + (1.0f - a.b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    const float mhat = mi * a.inv_bc1;
    const float vhat = vi * a.inv_bc2;
    const float p = param[i];
    param[i] = p - a.lr * (mhat / (sqrtf(vhat) + a.eps) + a.wd * p);
  }
}

}  // namespace

void adamw_step(Stream s, float* param, const float* grad, float* m, float* v, int64_t n,
                const AdamWHyper& h) {
  if (n <= 0) return;
  const float bc1 = 1.0f - static_cast<float>(std::pow(h.beta1, static_cast<double>(h.step)));
  const float bc2 = 1.0f - static_cast<float>(std::pow(h.beta2, static_cast<double>(h.step)));
  const AdamWArgs a{h.beta1, h.beta2, h.lr, h.weight_decay, h.eps, h.grad_scale, 1.0f / bc1,
                    1.0f / bc2};
  adamw_kernel<<<blocks_for(n), kThreads, 0, stream_of(s)>>>(param, grad, m, v, n, a);
  MT_CUDA_CHECK_LAUNCH("adamw_step");
}

}  // namespace meshtrain::cuda
