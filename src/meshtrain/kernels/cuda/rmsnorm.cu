// RMSNorm: one warp per row; dweight by deterministic column sums.
#include "meshtrain/kernels/cuda/colsum.cuh"
#include "meshtrain/kernels/cuda/norms.h"

namespace meshtrain::cuda {

namespace {

constexpr int kRowsPerBlock = kThreads / 32;

__global__ void rmsnorm_forward_kernel(float* out, float* rstd, const float* inp,
                                       const float* weight, int64_t N, int64_t C, float eps) {
  const int64_t row = blockIdx.x * int64_t{kRowsPerBlock} + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= N) return;
  const float* x = inp + row * C;
  float* y = out + row * C;
  float ss = 0.f;
  for (int64_t c = lane; c < C; c += 32) ss += x[c] * x[c];
  const float r = 1.0f / sqrtf(warp_sum(ss) / C + eps);
  for (int64_t c = lane; c < C; c += 32) y[c] = x[c] * r * weight[c];
  if (lane == 0) rstd[row] = r;
}

__global__ void rmsnorm_backward_dinp_kernel(float* dinp, const float* dout, const float* inp,
                                             const float* weight, const float* rstd, int64_t N,
                                             int64_t C) {
  const int64_t row = blockIdx.x * int64_t{kRowsPerBlock} + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= N) return;
  const float* x = inp + row * C;
  const float* dy = dout + row * C;
  float* dx = dinp + row * C;
  const float r = rstd[row];
  float sum_dn_n = 0.f;
  for (int64_t c = lane; c < C; c += 32) sum_dn_n += dy[c] * weight[c] * x[c] * r;
  const float mean_dn_n = warp_sum(sum_dn_n) / C;
  for (int64_t c = lane; c < C; c += 32) {
    const float n = x[c] * r;
    dx[c] += (dy[c] * weight[c] - n * mean_dn_n) * r;
  }
}

struct NormTimesGrad {
  const float *x, *dy, *rstd;
  int64_t C;
  __device__ float operator()(int64_t i, int64_t c) const {
    return x[i * C + c] * rstd[i] * dy[i * C + c];
  }
};

}  // namespace

void rmsnorm_forward(Stream s, float* out, float* rstd, const float* inp, const float* weight,
                     int64_t N, int64_t C, float eps) {
  if (N <= 0 || C <= 0) return;
  const unsigned blocks = static_cast<unsigned>((N + kRowsPerBlock - 1) / kRowsPerBlock);
  rmsnorm_forward_kernel<<<blocks, kThreads, 0, stream_of(s)>>>(out, rstd, inp, weight, N, C, eps);
  MT_CUDA_CHECK_LAUNCH("rmsnorm_forward");
}

void rmsnorm_backward(Stream s, float* dinp, float* dweight, const float* dout, const float* inp,
                      const float* weight, const float* rstd, int64_t N, int64_t C) {
  if (N <= 0 || C <= 0) return;
  const cudaStream_t stream = stream_of(s);
  const unsigned blocks = static_cast<unsigned>((N + kRowsPerBlock - 1) / kRowsPerBlock);
  rmsnorm_backward_dinp_kernel<<<blocks, kThreads, 0, stream>>>(dinp, dout, inp, weight, rstd, N, C);
  MT_CUDA_CHECK_LAUNCH("rmsnorm_backward");
  if (dweight) periodic_colsum(stream, dweight, NormTimesGrad{inp, dout, rstd, C}, N, C, 1);
}

}  // namespace meshtrain::cuda
