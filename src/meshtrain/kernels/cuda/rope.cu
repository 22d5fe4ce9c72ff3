// rotate_half RoPE: channel j < hd/2 of a head pairs with j + hd/2; the pair
// (a, b) at position t becomes (a cos - b sin, b cos + a sin); the backward
// applies the inverse rotation. One thread per (row, head, pair).
#include "meshtrain/kernels/cuda/cuda_common.cuh"
#include "meshtrain/kernels/cuda/rope.h"

namespace meshtrain::cuda {

namespace {

template <bool Inverse>
__global__ void rope_kernel(float* x, int64_t rows, int64_t T, int64_t nheads, int64_t half,
                            int64_t row_stride, const float* cos_t, const float* sin_t) {
  const int64_t total = rows * nheads * half;
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < total;
       idx += int64_t{gridDim.x} * blockDim.x) {
    const int64_t j = idx % half;
    const int64_t h = (idx / half) % nheads;
    const int64_t row = idx / (half * nheads);
    const int64_t t = row % T;
    const float c = cos_t[t * half + j], s = sin_t[t * half + j];
    float* a = x + row * row_stride + h * 2 * half + j;
    float* b = a + half;
    const float av = *a, bv = *b;
    // _rn intrinsics: no FMA contraction, so the CPU's bits exactly.
    if (Inverse) {
      *a = __fadd_rn(__fmul_rn(av, c), __fmul_rn(bv, s));
      *b = __fsub_rn(__fmul_rn(bv, c), __fmul_rn(av, s));
    } else {
      *a = __fsub_rn(__fmul_rn(av, c), __fmul_rn(bv, s));
      *b = __fadd_rn(__fmul_rn(bv, c), __fmul_rn(av, s));
    }
  }
}

template <bool Inverse>
void rotate(Stream s, float* x, int64_t B, int64_t T, int64_t nheads, int64_t hd,
            int64_t row_stride, const RopeView& table, const char* name) {
  MT_OP_CHECK(T <= table.T && hd == 2 * table.half, name,
              "the rope table's T or head size does not fit the call");
  const int64_t total = B * T * nheads * table.half;
  if (total <= 0) return;
  rope_kernel<Inverse><<<blocks_for(total), kThreads, 0, stream_of(s)>>>(
      x, B * T, T, nheads, table.half, row_stride, table.cos, table.sin);
  MT_CUDA_CHECK_LAUNCH(name);
}

}  // namespace

void rope_forward(Stream s, float* x, int64_t B, int64_t T, int64_t nheads, int64_t hd,
                  int64_t row_stride, const RopeView& table) {
  rotate<false>(s, x, B, T, nheads, hd, row_stride, table, "rope_forward");
}

void rope_backward(Stream s, float* dx, int64_t B, int64_t T, int64_t nheads, int64_t hd,
                   int64_t row_stride, const RopeView& table) {
  rotate<true>(s, dx, B, T, nheads, hd, row_stride, table, "rope_backward");
}

}  // namespace meshtrain::cuda
