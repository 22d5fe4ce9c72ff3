// sum_squares in an order fixed by n alone (kernels/cuda/chunk_sum.cuh).
#include "meshtrain/kernels/cuda/chunk_sum.cuh"
#include "meshtrain/kernels/cuda/elementwise.h"

namespace meshtrain::cuda {

namespace {

__global__ void chunk_squares_kernel(const float* x, int64_t n, int64_t chunk, double* partial) {
  int64_t b, e;
  chunk_sum::chunk_range(n, chunk, b, e);
  double acc = 0.0;
  for (int64_t i = b + threadIdx.x; i < e; i += chunk_sum::kThreads) {
    const double v = x[i];
    acc += v * v;
  }
  chunk_sum::block_sum_to(acc, partial + blockIdx.x);
}

}  // namespace

double sum_squares(Stream s, const float* x, int64_t n) {
  const cudaStream_t stream = stream_of(s);
  return chunk_sum::sum(stream, n, "sum_squares", [&](double* p, int64_t chunk) {
    chunk_squares_kernel<<<chunk_sum::kChunks, chunk_sum::kThreads, 0, stream>>>(x, n, chunk, p);
  });
}

}  // namespace meshtrain::cuda
