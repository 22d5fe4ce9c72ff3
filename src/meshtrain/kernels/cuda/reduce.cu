// sum_squares: 1024 fixed chunks of ceil(n / 1024) elements, each summed in
// double by one block (each thread a fixed stride, then a fixed tree), and
// the chunk sums added in order by one thread: the order depends on n alone.
#include "meshtrain/kernels/cuda/cuda_common.cuh"
#include "meshtrain/kernels/cuda/elementwise.h"

namespace meshtrain::cuda {

namespace {

constexpr int kChunks = 1024;
constexpr int kReduceThreads = 256;

__global__ void chunk_squares_kernel(const float* x, int64_t n, int64_t chunk, double* partial) {
  __shared__ double sh[kReduceThreads];
  const int64_t b = blockIdx.x * chunk;
  const int64_t e = min(n, b + chunk);
  double acc = 0.0;
  for (int64_t i = b + threadIdx.x; i < e; i += kReduceThreads) {
    const double v = x[i];
    acc += v * v;
  }
  sh[threadIdx.x] = acc;
  __syncthreads();
  for (int w = kReduceThreads / 2; w > 0; w >>= 1) {
    if (threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = sh[0];
}

__global__ void sum_chunks_kernel(const double* partial, double* result) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  double s = 0.0;
  for (int c = 0; c < kChunks; ++c) s += partial[c];
  *result = s;
}

}  // namespace

double sum_squares(Stream s, const float* x, int64_t n) {
  if (n <= 0) return 0.0;
  const cudaStream_t stream = stream_of(s);
  const int64_t chunk = (n + kChunks - 1) / kChunks;
  Scratch partial(sizeof(double) * (kChunks + 1), stream);
  double* p = partial.as<double>();
  chunk_squares_kernel<<<kChunks, kReduceThreads, 0, stream>>>(x, n, chunk, p);
  MT_CUDA_CHECK_LAUNCH("sum_squares");
  sum_chunks_kernel<<<1, 32, 0, stream>>>(p, p + kChunks);
  MT_CUDA_CHECK_LAUNCH("sum_squares (chunks)");
  double result = 0.0;
  MT_CUDA_CHECK(cudaMemcpyAsync(&result, p + kChunks, sizeof(double), cudaMemcpyDeviceToHost, stream));
  MT_CUDA_CHECK(cudaStreamSynchronize(stream));
  return result;
}

}  // namespace meshtrain::cuda
