// Shared pieces of the CUDA kernels: the stream of a meshtrain::Stream, grid
// sizes, warp and block reductions in a fixed order, and stream-ordered
// scratch memory. CUDA-only (included by .cu files).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "meshtrain/core/stream.h"
#include "meshtrain/kernels/cuda/cuda_check.h"

namespace meshtrain::cuda {

inline cudaStream_t stream_of(Stream s) { return static_cast<cudaStream_t>(s.handle); }

constexpr int kThreads = 256;

// Blocks for a grid-stride loop over n items (n > 0), capped: each thread
// then loops; the cap keeps the grid well inside the limits.
inline unsigned blocks_for(int64_t n, int threads = kThreads) {
  const int64_t b = (n + threads - 1) / threads;
  return static_cast<unsigned>(b < 65536 ? b : 65536);
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024), the same
// order every run; every thread gets the result. `shared` holds 32 floats and
// may be reused right after the call returns.
__device__ __forceinline__ float block_sum(float v, float* shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // shared may still be read by a previous call
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < nwarps ? shared[lane] : 0.f;
  return warp_sum(v);
}

__device__ __forceinline__ float block_max(float v, float* shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < nwarps ? shared[lane] : -INFINITY;
  return warp_max(v);
}

// The default memory pool returns its memory to the device at every host
// synchronization unless told to keep it; scratch requests repeat every step
// (and several ops synchronize every step), so it keeps what it holds. Once
// per process: one GPU per process.
inline void keep_scratch_pool() {
  static const bool kept = [] {
    int dev = 0;
    MT_CUDA_CHECK(cudaGetDevice(&dev));
    cudaMemPool_t pool;
    MT_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, dev));
    uint64_t keep = UINT64_MAX;
    MT_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
    return true;
  }();
  (void)kept;
}

// Stream-ordered scratch memory (cudaMallocAsync), freed on the same stream
// when it goes out of scope: later work on the stream may still use it until
// then, and the allocator does not reuse it before that work is done.
class Scratch {
 public:
  Scratch(size_t bytes, cudaStream_t stream) : stream_(stream) {
    if (bytes == 0) return;
    keep_scratch_pool();
    MT_CUDA_CHECK(cudaMallocAsync(&ptr_, bytes, stream));
  }
  ~Scratch() {
    if (ptr_) cudaFreeAsync(ptr_, stream_);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  template <typename T>
  T* as() const { return static_cast<T*>(ptr_); }

 private:
  void* ptr_ = nullptr;
  cudaStream_t stream_;
};

}  // namespace meshtrain::cuda
