// copy and add_inplace.
#include "meshtrain/kernels/cuda/elementwise.h"

#include "meshtrain/kernels/cuda/cuda_common.cuh"

namespace meshtrain::cuda {

namespace {
__global__ void add_inplace_kernel(float* out, const float* a, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    out[i] += a[i];
}
}  // namespace

void copy(Stream s, float* out, const float* a, int64_t n) {
  if (n <= 0 || out == a) return;
  MT_CUDA_CHECK(cudaMemcpyAsync(out, a, sizeof(float) * n, cudaMemcpyDeviceToDevice, stream_of(s)));
}

void add_inplace(Stream s, float* out, const float* a, int64_t n) {
  if (n <= 0) return;
  add_inplace_kernel<<<blocks_for(n), kThreads, 0, stream_of(s)>>>(out, a, n);
  MT_CUDA_CHECK_LAUNCH("add_inplace");
}

}  // namespace meshtrain::cuda
