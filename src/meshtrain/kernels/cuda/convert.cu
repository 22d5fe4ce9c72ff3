// f32 <-> bf16/f16 with core/half.h's exact rounding (half_bits.cuh).
#include "meshtrain/kernels/cuda/cuda_common.cuh"
#include "meshtrain/kernels/cuda/elementwise.h"
#include "meshtrain/kernels/cuda/half_bits.cuh"

namespace meshtrain::cuda {

namespace {

template <HalfFormat F>
__global__ void to_half_kernel(const float* in, uint16_t* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    out[i] = F == HalfFormat::BF16 ? f32_to_bf16_bits(in[i]) : f32_to_f16_bits(in[i]);
}

template <HalfFormat F>
__global__ void from_half_kernel(const uint16_t* in, float* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    out[i] = F == HalfFormat::BF16 ? bf16_bits_to_f32(in[i]) : f16_bits_to_f32(in[i]);
}

}  // namespace

void to_half(Stream s, HalfFormat fmt, const float* in, uint16_t* out, int64_t n) {
  if (n <= 0) return;
  if (fmt == HalfFormat::BF16)
    to_half_kernel<HalfFormat::BF16><<<blocks_for(n), kThreads, 0, stream_of(s)>>>(in, out, n);
  else
    to_half_kernel<HalfFormat::F16><<<blocks_for(n), kThreads, 0, stream_of(s)>>>(in, out, n);
  MT_CUDA_CHECK_LAUNCH("to_half");
}

void from_half(Stream s, HalfFormat fmt, const uint16_t* in, float* out, int64_t n) {
  if (n <= 0) return;
  if (fmt == HalfFormat::BF16)
    from_half_kernel<HalfFormat::BF16><<<blocks_for(n), kThreads, 0, stream_of(s)>>>(in, out, n);
  else
    from_half_kernel<HalfFormat::F16><<<blocks_for(n), kThreads, 0, stream_of(s)>>>(in, out, n);
  MT_CUDA_CHECK_LAUNCH("from_half");
}

}  // namespace meshtrain::cuda
