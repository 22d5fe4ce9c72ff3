// SGD/LARS and LAMB on the GPU: kernels/cpu/sgd.cpp's and lamb.cpp's
// formulas in f32; LAMB's sum of squares in double in an order fixed by n
// alone (kernels/cuda/chunk_sum.cuh, as sum_squares).
#include <cmath>

#include "meshtrain/kernels/cuda/chunk_sum.cuh"
#include "meshtrain/kernels/cuda/elementwise.h"

namespace meshtrain::cuda {

namespace {

__global__ void sgd_kernel(float* param, const float* grad, float* buf, int64_t n, SgdHyper h) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float g = (grad[i] * h.grad_scale + h.weight_decay * param[i]) * h.trust;
    if (h.momentum == 0.0f) {
      param[i] -= h.lr * g;
      continue;
    }
    const float b = h.first ? g : h.momentum * buf[i] + (1.0f - h.dampening) * g;
    buf[i] = b;
    param[i] -= h.lr * (h.nesterov ? g + h.momentum * b : b);
  }
}

struct LambArgs {
  float b1, b2, eps, wd, gs, inv_bc1, inv_bc2;
};

LambArgs lamb_args(const LambHyper& h) {
  LambArgs a{h.beta1, h.beta2, h.eps, h.weight_decay, h.grad_scale, 1.0f, 1.0f};
  if (h.bias_correction) {
    const double t = static_cast<double>(h.step);
    a.inv_bc1 = 1.0f / (1.0f - static_cast<float>(std::pow(h.beta1, t)));
    a.inv_bc2 = 1.0f / (1.0f - static_cast<float>(std::pow(h.beta2, t)));
  }
  return a;
}

__device__ float lamb_update(float m, float v, float p, const LambArgs& a) {
  return (m * a.inv_bc1) / (sqrtf(v * a.inv_bc2) + a.eps) + a.wd * p;
}

// One block per chunk: moments updated, the chunk's squares of u summed.
__global__ void lamb_moments_kernel(const float* grad, float* m, float* v, const float* param,
                                    int64_t n, int64_t chunk, LambArgs a, double* partial) {
  int64_t b, e;
  chunk_sum::chunk_range(n, chunk, b, e);
  double acc = 0.0;
  for (int64_t i = b + threadIdx.x; i < e; i += chunk_sum::kThreads) {
    const float g = grad[i] * a.gs;
    const float mi = a.b1 * m[i] + (1.0f - a.b1) * g;
    const float vi = a.b2 * v[i] + (1.0f - a.b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    const double u = lamb_update(mi, vi, param[i], a);
    acc += u * u;
  }
  chunk_sum::block_sum_to(acc, partial + blockIdx.x);
}

__global__ void lamb_apply_kernel(float* param, const float* m, const float* v, int64_t n,
                                  LambArgs a, float step_size) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    param[i] -= step_size * lamb_update(m[i], v[i], param[i], a);
}

}  // namespace

void sgd_step(Stream s, float* param, const float* grad, float* buf, int64_t n, const SgdHyper& h) {
  if (n <= 0) return;
  sgd_kernel<<<blocks_for(n), kThreads, 0, stream_of(s)>>>(param, grad, buf, n, h);
  MT_CUDA_CHECK_LAUNCH("sgd_step");
}

double lamb_moments(Stream s, const float* grad, float* m, float* v, const float* param, int64_t n,
                    const LambHyper& h) {
  const cudaStream_t stream = stream_of(s);
  const LambArgs a = lamb_args(h);
  // Blocks past the end (n < 1024) write 0: the order of the sum is kept.
  return chunk_sum::sum(stream, n, "lamb_moments", [&](double* p, int64_t chunk) {
    lamb_moments_kernel<<<chunk_sum::kChunks, chunk_sum::kThreads, 0, stream>>>(grad, m, v, param,
                                                                               n, chunk, a, p);
  });
}

void lamb_apply(Stream s, float* param, const float* m, const float* v, int64_t n,
                const LambHyper& h, float step_size) {
  if (n <= 0) return;
  lamb_apply_kernel<<<blocks_for(n), kThreads, 0, stream_of(s)>>>(param, m, v, n, lamb_args(h),
                                                                   step_size);
  MT_CUDA_CHECK_LAUNCH("lamb_apply");
}

}  // namespace meshtrain::cuda
