// One block per row: max, then sum of exp(x - max) over the V real columns
// (fixed-order block reductions), loss = log(sum) + max - x[target]. The
// backward overwrites the row with dloss (softmax - onehot), zeros in the
// padded columns and in ignored rows (target < 0). A target >= V is out of
// range: its loss is NaN and no one-hot is subtracted.
#include "meshtrain/kernels/cuda/cuda_common.cuh"
#include "meshtrain/kernels/cuda/softmax_cross_entropy.h"

namespace meshtrain::cuda {

namespace {

constexpr int kRowThreads = 512;

struct RowStats {
  float mx, sum;
};

__device__ RowStats row_stats(const float* x, int64_t V, float* sh) {
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x) m = fmaxf(m, x[j]);
  m = block_max(m, sh);
  float s = 0.f;
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x) s += expf(x[j] - m);
  s = block_sum(s, sh);
  return {m, s};
}

__global__ void sce_forward_kernel(float* losses, const float* logits, const int32_t* targets,
                                   int64_t N, int64_t V, int64_t Vp,
                                   unsigned long long* counted) {
  __shared__ float sh[32];
  const int64_t row = blockIdx.x;
  const int32_t t = targets[row];
  if (t < 0) {  // the whole block leaves together
    if (threadIdx.x == 0) losses[row] = 0.f;
    return;
  }
  const float* x = logits + row * Vp;
  const RowStats st = row_stats(x, V, sh);
  if (threadIdx.x == 0) {
    losses[row] = t < V ? logf(st.sum) + st.mx - x[t] : NAN;
    atomicAdd(counted, 1ull);  // an integer count: exact in any order
  }
}

__global__ void sce_backward_kernel(float* logits, const int32_t* targets, float dloss, int64_t N,
                                    int64_t V, int64_t Vp) {
  __shared__ float sh[32];
  const int64_t row = blockIdx.x;
  const int32_t t = targets[row];
  float* x = logits + row * Vp;
  if (t < 0) {
    for (int64_t j = threadIdx.x; j < Vp; j += blockDim.x) x[j] = 0.f;
    return;
  }
  const RowStats st = row_stats(x, V, sh);  // every read of x is done before its last barrier
  const float shift = st.mx + logf(st.sum);
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x) {
    const float g = __fmul_rn(dloss, expf(x[j] - shift));
    x[j] = j == t ? g - dloss : g;  // the CPU's x[t] -= dloss after the product
  }
  for (int64_t j = V + threadIdx.x; j < Vp; j += blockDim.x) x[j] = 0.f;
}

}  // namespace

int64_t softmax_cross_entropy_forward(Stream s, float* losses, const float* logits,
                                      const int32_t* targets, int64_t N, int64_t V, int64_t Vp) {
  if (N <= 0) return 0;
  MT_OP_CHECK(N < (int64_t{1} << 31), "softmax_cross_entropy_forward", "more than 2^31 - 1 rows");
  const cudaStream_t stream = stream_of(s);
  Scratch count(sizeof(unsigned long long), stream);
  MT_CUDA_CHECK(cudaMemsetAsync(count.as<void>(), 0, sizeof(unsigned long long), stream));
  sce_forward_kernel<<<static_cast<unsigned>(N), kRowThreads, 0, stream>>>(
      losses, logits, targets, N, V, Vp, count.as<unsigned long long>());
  MT_CUDA_CHECK_LAUNCH("softmax_cross_entropy_forward");
  unsigned long long host = 0;
  MT_CUDA_CHECK(cudaMemcpyAsync(&host, count.as<void>(), sizeof(host), cudaMemcpyDeviceToHost, stream));
  MT_CUDA_CHECK(cudaStreamSynchronize(stream));
  return static_cast<int64_t>(host);
}

void softmax_cross_entropy_backward(Stream s, float* logits, const int32_t* targets, float dloss,
                                    int64_t N, int64_t V, int64_t Vp) {
  if (N <= 0) return;
  MT_OP_CHECK(N < (int64_t{1} << 31), "softmax_cross_entropy_backward", "more than 2^31 - 1 rows");
  sce_backward_kernel<<<static_cast<unsigned>(N), kRowThreads, 0, stream_of(s)>>>(logits, targets,
                                                                                  dloss, N, V, Vp);
  MT_CUDA_CHECK_LAUNCH("softmax_cross_entropy_backward");
}

}  // namespace meshtrain::cuda
