// copy, copy_2d and add_inplace.
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

void copy_2d(Stream s, void* dst, int64_t dst_pitch, const void* src, int64_t src_pitch,
             int64_t row_bytes, int64_t rows) {
  if (rows <= 0 || row_bytes <= 0) return;
  MT_CUDA_CHECK(cudaMemcpy2DAsync(dst, static_cast<size_t>(dst_pitch), src,
                                  static_cast<size_t>(src_pitch), static_cast<size_t>(row_bytes),
                                  static_cast<size_t>(rows), cudaMemcpyDeviceToDevice, stream_of(s)));
}

}  // namespace meshtrain::cuda
