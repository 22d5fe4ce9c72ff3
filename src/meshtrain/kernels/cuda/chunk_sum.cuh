// Sums in double whose order depends on n alone (sum_squares, LAMB's update
// squares): 1024 fixed chunks of ceil(n / 1024) elements, each summed by one
// block (each thread a fixed stride, then a fixed tree), and the chunk sums
// added in order by one thread.
#pragma once
#include "meshtrain/kernels/cuda/cuda_common.cuh"

namespace meshtrain::cuda::chunk_sum {

constexpr int kChunks = 1024;
constexpr int kThreads = 256;

// Chunk blockIdx.x's element range [b, e).
__device__ inline void chunk_range(int64_t n, int64_t chunk, int64_t& b, int64_t& e) {
  b = blockIdx.x * chunk;
  e = min(n, b + chunk);
}

// The block's fixed-tree sum of each thread's `v`, written by thread 0 to out.
__device__ inline void block_sum_to(double v, double* out) {
  __shared__ double sh[kThreads];
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int w = kThreads / 2; w > 0; w >>= 1) {
    if (threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = sh[0];
}

namespace {  // each translation unit its own copy of the kernel
__global__ void add_chunks_kernel(const double* partial, double* result) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  double s = 0.0;
  for (int c = 0; c < kChunks; ++c) s += partial[c];
  *result = s;
}
}  // namespace

// Launches `chunks(partial, chunk)` (kChunks blocks of kThreads, each writing
// partial[blockIdx.x]), adds the chunks in order and returns the sum (waits
// for the stream). `what` names the op in launch errors.
template <typename LaunchChunks>
double sum(cudaStream_t stream, int64_t n, const char* what, LaunchChunks chunks) {
  if (n <= 0) return 0.0;
  const int64_t chunk = (n + kChunks - 1) / kChunks;
  Scratch partial(sizeof(double) * (kChunks + 1), stream);
  double* p = partial.as<double>();
  chunks(p, chunk);
  MT_CUDA_CHECK_LAUNCH(what);
  add_chunks_kernel<<<1, 32, 0, stream>>>(p, p + kChunks);
  MT_CUDA_CHECK_LAUNCH(what);
  double result = 0.0;
  MT_CUDA_CHECK(cudaMemcpyAsync(&result, p + kChunks, sizeof(double), cudaMemcpyDeviceToHost, stream));
  MT_CUDA_CHECK(cudaStreamSynchronize(stream));
  return result;
}

}  // namespace meshtrain::cuda::chunk_sum
