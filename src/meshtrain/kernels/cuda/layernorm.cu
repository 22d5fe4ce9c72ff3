// LayerNorm: one warp per row (two passes: mean, then centered variance, as
// the CPU); parameter gradients by deterministic column sums (colsum.cuh).
#include "meshtrain/kernels/cpu/layernorm.h"  // kLayerNormEps
#include "meshtrain/kernels/cuda/colsum.cuh"
#include "meshtrain/kernels/cuda/norms.h"

namespace meshtrain::cuda {

namespace {

constexpr int kRowsPerBlock = kThreads / 32;

__global__ void layernorm_forward_kernel(float* out, float* mean, float* rstd, const float* inp,
                                         const float* weight, const float* bias, int64_t N,
                                         int64_t C) {
  const int64_t row = blockIdx.x * int64_t{kRowsPerBlock} + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= N) return;
  const float* x = inp + row * C;
  float* y = out + row * C;
  float s = 0.f;
  for (int64_t c = lane; c < C; c += 32) s += x[c];
  const float m = warp_sum(s) / C;
  float v = 0.f;
  for (int64_t c = lane; c < C; c += 32) {
    const float d = x[c] - m;
    v += d * d;
  }
  const float r = 1.0f / sqrtf(warp_sum(v) / C + cpu::kLayerNormEps);
  for (int64_t c = lane; c < C; c += 32) y[c] = (x[c] - m) * r * weight[c] + bias[c];
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = r;
  }
}

__global__ void layernorm_backward_dinp_kernel(float* dinp, const float* dout, const float* inp,
                                               const float* weight, const float* mean,
                                               const float* rstd, int64_t N, int64_t C) {
  const int64_t row = blockIdx.x * int64_t{kRowsPerBlock} + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= N) return;
  const float* x = inp + row * C;
  const float* dy = dout + row * C;
  float* dx = dinp + row * C;
  const float m = mean[row], r = rstd[row];
  float sum_dn = 0.f, sum_dn_n = 0.f;
  for (int64_t c = lane; c < C; c += 32) {
    const float n = (x[c] - m) * r;
    const float dn = dy[c] * weight[c];
    sum_dn += dn;
    sum_dn_n += dn * n;
  }
  const float mean_dn = warp_sum(sum_dn) / C, mean_dn_n = warp_sum(sum_dn_n) / C;
  for (int64_t c = lane; c < C; c += 32) {
    const float n = (x[c] - m) * r;
    const float dn = dy[c] * weight[c];
    dx[c] += (dn - mean_dn - n * mean_dn_n) * r;
  }
}

// dweight's terms: normalized input times the output gradient.
struct NormTimesGrad {
  const float *x, *dy, *mean, *rstd;
  int64_t C;
  __device__ float operator()(int64_t i, int64_t c) const {
    return (x[i * C + c] - mean[i]) * rstd[i] * dy[i * C + c];
  }
};

}  // namespace

void layernorm_forward(Stream s, float* out, float* mean, float* rstd, const float* inp,
                       const float* weight, const float* bias, int64_t N, int64_t C) {
  if (N <= 0 || C <= 0) return;
  const unsigned blocks = static_cast<unsigned>((N + kRowsPerBlock - 1) / kRowsPerBlock);
  layernorm_forward_kernel<<<blocks, kThreads, 0, stream_of(s)>>>(out, mean, rstd, inp, weight,
                                                                  bias, N, C);
  MT_CUDA_CHECK_LAUNCH("layernorm_forward");
}

void layernorm_backward(Stream s, float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean,
                        const float* rstd, int64_t N, int64_t C) {
  if (N <= 0 || C <= 0) return;
  const cudaStream_t stream = stream_of(s);
  const unsigned blocks = static_cast<unsigned>((N + kRowsPerBlock - 1) / kRowsPerBlock);
  layernorm_backward_dinp_kernel<<<blocks, kThreads, 0, stream>>>(dinp, dout, inp, weight, mean,
                                                                  rstd, N, C);
  MT_CUDA_CHECK_LAUNCH("layernorm_backward");
  if (dweight) periodic_colsum(stream, dweight, NormTimesGrad{inp, dout, mean, rstd, C}, N, C, 1);
  if (dbias) periodic_colsum(stream, dbias, ReadMatrix{dout, C}, N, C, 1);
}

}  // namespace meshtrain::cuda
