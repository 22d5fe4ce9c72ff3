// Rows added or summed with a period (biases: period 1, positions: period T).
// sum_periodic_rows adds each residue's rows in ascending i: directly, one
// thread per (t, c) in the CPU's order, when a residue has at most
// kDirectMax rows; otherwise in fixed chunks (colsum.cuh). Either way the
// order depends on the shapes alone.
#include "meshtrain/kernels/cuda/colsum.cuh"
#include "meshtrain/kernels/cuda/embedding.h"

namespace meshtrain::cuda {

namespace {

constexpr int64_t kDirectMax = 64;

__global__ void add_periodic_kernel(float* out, const float* rows, int64_t N, int64_t C,
                                    int64_t period, int64_t first) {
  const int64_t total = N * C;
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < total;
       idx += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = idx / C, c = idx % C;
    out[idx] += rows[((first + i) % period) * C + c];
  }
}

__global__ void sum_periodic_direct_kernel(float* drows, const float* d, int64_t N, int64_t C,
                                           int64_t period) {
  const int64_t total = period * C;
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < total;
       idx += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = idx / C, c = idx % C;
    float acc = drows[idx];
    for (int64_t i = t; i < N; i += period) acc += d[i * C + c];
    drows[idx] = acc;
  }
}

}  // namespace

void add_periodic_rows(Stream s, float* out, const float* rows, int64_t N, int64_t C,
                       int64_t period, int64_t first) {
  if (N <= 0 || C <= 0) return;
  MT_OP_CHECK(period > 0 && first >= 0, "add_periodic_rows", "needs period > 0 and first >= 0");
  add_periodic_kernel<<<blocks_for(N * C), kThreads, 0, stream_of(s)>>>(out, rows, N, C, period,
                                                                        first);
  MT_CUDA_CHECK_LAUNCH("add_periodic_rows");
}

void sum_periodic_rows(Stream s, float* drows, const float* d, int64_t N, int64_t C,
                       int64_t period) {
  if (N <= 0 || C <= 0) return;
  MT_OP_CHECK(period > 0, "sum_periodic_rows", "needs period > 0");
  if ((N + period - 1) / period <= kDirectMax) {
    sum_periodic_direct_kernel<<<blocks_for(period * C), kThreads, 0, stream_of(s)>>>(drows, d, N,
                                                                                      C, period);
    MT_CUDA_CHECK_LAUNCH("sum_periodic_rows");
    return;
  }
  periodic_colsum(stream_of(s), drows, ReadMatrix{d, C}, N, C, period);
}

}  // namespace meshtrain::cuda
