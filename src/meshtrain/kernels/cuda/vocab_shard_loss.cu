// One block per row with fixed-order block reductions (cuda_common.cuh).
#include "meshtrain/kernels/cuda/cuda_common.cuh"
#include "meshtrain/kernels/cuda/vocab_shard_loss.h"

namespace meshtrain::cuda {

namespace {

constexpr int kRowThreads = 512;

__global__ void row_max_kernel(float* maxes, const float* logits, int64_t real, int64_t stride) {
  __shared__ float sh[32];
  const float* x = logits + blockIdx.x * stride;
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < real; j += blockDim.x) m = fmaxf(m, x[j]);
  m = block_max(m, sh);
  if (threadIdx.x == 0) maxes[blockIdx.x] = m;
}

__global__ void sum_exp_kernel(float* scratch, const float* logits, const float* maxes,
                               const int32_t* targets, int64_t real, int64_t stride,
                               int64_t v_begin) {
  __shared__ float sh[32];
  const int64_t i = blockIdx.x;
  const float* x = logits + i * stride;
  const float m = maxes[i];
  float s = 0.f;
  for (int64_t j = threadIdx.x; j < real; j += blockDim.x) s += expf(x[j] - m);
  s = block_sum(s, sh);
  if (threadIdx.x == 0) {
    const int64_t t = static_cast<int64_t>(targets[i]) - v_begin;
    scratch[2 * i] = s;
    scratch[2 * i + 1] = targets[i] >= 0 && t >= 0 && t < real ? x[t] : 0.f;
  }
}

__global__ void losses_kernel(float* losses, float* lse, const float* scratch,
                              const int32_t* targets, int64_t N, unsigned long long* counted) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < N;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float l = lse[i] + logf(scratch[2 * i]);
    lse[i] = l;
    if (targets[i] < 0) {
      losses[i] = 0.f;
      continue;
    }
    losses[i] = l - scratch[2 * i + 1];
    atomicAdd(counted, 1ull);  // an integer count: exact in any order
  }
}

__global__ void backward_kernel(float* logits, const float* lse, const int32_t* targets,
                                float dloss, int64_t real, int64_t stride, int64_t v_begin) {
  const int64_t i = blockIdx.x;
  float* x = logits + i * stride;
  if (targets[i] < 0) {
    for (int64_t j = threadIdx.x; j < stride; j += blockDim.x) x[j] = 0.f;
    return;
  }
  const float shift = lse[i];
  const int64_t t = static_cast<int64_t>(targets[i]) - v_begin;
  for (int64_t j = threadIdx.x; j < real; j += blockDim.x) {
    const float g = __fmul_rn(dloss, expf(x[j] - shift));
    x[j] = j == t ? g - dloss : g;
  }
  for (int64_t j = real + threadIdx.x; j < stride; j += blockDim.x) x[j] = 0.f;
}

void check_rows(int64_t N, const char* name) {
  MT_OP_CHECK(N < (int64_t{1} << 31), name, "more than 2^31 - 1 rows");
}

}  // namespace

void vocab_shard_row_max(Stream s, float* maxes, const float* logits, int64_t N, int64_t real,
                         int64_t stride) {
  if (N <= 0) return;
  check_rows(N, "vocab_shard_row_max");
  row_max_kernel<<<static_cast<unsigned>(N), kRowThreads, 0, stream_of(s)>>>(maxes, logits, real,
                                                                            stride);
  MT_CUDA_CHECK_LAUNCH("vocab_shard_row_max");
}

void vocab_shard_sum_exp(Stream s, float* scratch, const float* logits, const float* maxes,
                         const int32_t* targets, int64_t N, int64_t real, int64_t stride,
                         int64_t v_begin) {
  if (N <= 0) return;
  check_rows(N, "vocab_shard_sum_exp");
  sum_exp_kernel<<<static_cast<unsigned>(N), kRowThreads, 0, stream_of(s)>>>(
      scratch, logits, maxes, targets, real, stride, v_begin);
  MT_CUDA_CHECK_LAUNCH("vocab_shard_sum_exp");
}

int64_t vocab_shard_losses(Stream s, float* losses, float* lse, const float* scratch,
                           const int32_t* targets, int64_t N) {
  if (N <= 0) return 0;
  const cudaStream_t stream = stream_of(s);
  Scratch count(sizeof(unsigned long long), stream);
  MT_CUDA_CHECK(cudaMemsetAsync(count.as<void>(), 0, sizeof(unsigned long long), stream));
  losses_kernel<<<blocks_for(N), kThreads, 0, stream>>>(losses, lse, scratch, targets, N,
                                                        count.as<unsigned long long>());
  MT_CUDA_CHECK_LAUNCH("vocab_shard_losses");
  unsigned long long host = 0;
  MT_CUDA_CHECK(cudaMemcpyAsync(&host, count.as<void>(), sizeof(host), cudaMemcpyDeviceToHost, stream));
  MT_CUDA_CHECK(cudaStreamSynchronize(stream));
  return static_cast<int64_t>(host);
}

void vocab_shard_backward(Stream s, float* logits, const float* lse, const int32_t* targets,
                          float dloss, int64_t N, int64_t real, int64_t stride, int64_t v_begin) {
  if (N <= 0) return;
  check_rows(N, "vocab_shard_backward");
  backward_kernel<<<static_cast<unsigned>(N), kRowThreads, 0, stream_of(s)>>>(
      logits, lse, targets, dloss, real, stride, v_begin);
  MT_CUDA_CHECK_LAUNCH("vocab_shard_backward");
}

}  // namespace meshtrain::cuda
