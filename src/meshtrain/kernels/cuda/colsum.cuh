// Deterministic column sums with a period: out[t*C + c] += sum of f(i, c)
// over rows i < N with i % period == t, in an order fixed by (N, C, period)
// alone: rows are taken in fixed chunks of occurrences, each chunk summed by
// one block in a fixed tree, and the chunk sums added in chunk order. No
// atomics. period 1 gives plain column sums (bias gradients). CUDA-only.
#pragma once
#include <algorithm>
#include <cstdint>

#include "meshtrain/kernels/cuda/cuda_common.cuh"

namespace meshtrain::cuda {

namespace colsum_detail {
constexpr int kCols = 32;   // columns per block (one warp wide: coalesced rows)
constexpr int kRowLanes = 8;  // row groups per block

__device__ __forceinline__ int64_t occurrences(int64_t N, int64_t period, int64_t t) {
  return t < N ? (N - 1 - t) / period + 1 : 0;
}

// One block: columns [cb*32, cb*32+32) of residue t, occurrences of chunk
// blockIdx.y. Writes the chunk's sum to partial, or adds it to out directly
// when there is one chunk (partial == nullptr).
template <typename F>
__global__ void partial_kernel(F f, int64_t N, int64_t C, int64_t period, int64_t col_blocks,
                               int64_t per_chunk, float* partial, float* out) {
  __shared__ float sh[kRowLanes][kCols + 1];
  const int64_t cb = blockIdx.x % col_blocks, t = blockIdx.x / col_blocks;
  const int64_t c = cb * kCols + threadIdx.x;
  const int64_t chunk = blockIdx.y;
  const int64_t m0 = chunk * per_chunk;
  const int64_t m1 = min(occurrences(N, period, t), m0 + per_chunk);
  float acc = 0.f;
  if (c < C)
    for (int64_t m = m0 + threadIdx.y; m < m1; m += kRowLanes) acc += f(t + m * period, c);
  sh[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float s = 0.f;
#pragma unroll
    for (int y = 0; y < kRowLanes; ++y) s += sh[y][threadIdx.x];
    if (partial)
      partial[(chunk * period + t) * C + c] = s;
    else
      out[t * C + c] += s;
  }
}

// Adds the chunk sums of each (t, c) in chunk order. A template so each
// .cu file that uses it gets its own copy (no separate compilation).
template <typename = void>
__global__ void finish_kernel(float* out, const float* partial, int64_t nchunks, int64_t period,
                              int64_t C) {
  const int64_t total = period * C;
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < total;
       idx += int64_t{gridDim.x} * blockDim.x) {
    float s = 0.f;
    for (int64_t k = 0; k < nchunks; ++k) s += partial[k * total + idx];
    out[idx] += s;
  }
}
}  // namespace colsum_detail

// F: a copyable functor with `__device__ float operator()(int64_t i, int64_t c) const`.
template <typename F>
void periodic_colsum(cudaStream_t stream, float* out, F f, int64_t N, int64_t C, int64_t period) {
  using namespace colsum_detail;
  if (N <= 0 || C <= 0 || period <= 0) return;
  const int64_t max_occ = (N + period - 1) / period;
  int64_t per_chunk = 256;
  if ((max_occ + per_chunk - 1) / per_chunk > 65535) per_chunk = (max_occ + 65534) / 65535;
  const int64_t nchunks = (max_occ + per_chunk - 1) / per_chunk;
  const int64_t col_blocks = (C + kCols - 1) / kCols;
  MT_OP_CHECK(col_blocks * period < (int64_t{1} << 31), "periodic_colsum", "too many rows and columns");
  const dim3 grid(static_cast<unsigned>(col_blocks * period), static_cast<unsigned>(nchunks));
  const dim3 block(kCols, kRowLanes);
  if (nchunks == 1) {
    partial_kernel<<<grid, block, 0, stream>>>(f, N, C, period, col_blocks, per_chunk, nullptr, out);
    MT_CUDA_CHECK_LAUNCH("periodic_colsum");
    return;
  }
  Scratch partial(sizeof(float) * nchunks * period * C, stream);
  partial_kernel<<<grid, block, 0, stream>>>(f, N, C, period, col_blocks, per_chunk,
                                             partial.as<float>(), out);
  MT_CUDA_CHECK_LAUNCH("periodic_colsum");
  finish_kernel<><<<blocks_for(period * C), kThreads, 0, stream>>>(out, partial.as<float>(), nchunks,
                                                                  period, C);
  MT_CUDA_CHECK_LAUNCH("periodic_colsum finish");
}

// Reads row-major m (N, C) as it is.
struct ReadMatrix {
  const float* m;
  int64_t C;
  __device__ float operator()(int64_t i, int64_t c) const { return m[i * C + c]; }
};

}  // namespace meshtrain::cuda
