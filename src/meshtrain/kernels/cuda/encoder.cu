// Token and position embeddings. The token-gradient scatter sorts (id, i)
// pairs with CUB's stable radix sort, then one thread per (first pair of an
// id, channel) adds that id's rows in ascending i onto the table row: the
// CPU's order, so the same bits, and no atomics.
#include <cub/device/device_radix_sort.cuh>

#include <climits>
#include <limits>

#include "meshtrain/kernels/cuda/cuda_common.cuh"
#include "meshtrain/kernels/cuda/embedding.h"
#include "meshtrain/kernels/cuda/half_bits.cuh"

namespace meshtrain::cuda {

namespace {

__global__ void encoder_forward_kernel(float* out, const int32_t* inp, const float* wte,
                                       const float* wpe, int64_t BT, int64_t T, int64_t C) {
  const int64_t total = BT * C;
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < total;
       idx += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = idx / C, c = idx % C;
    out[idx] = wte[static_cast<int64_t>(inp[i]) * C + c] + wpe[(i % T) * C + c];
  }
}

__global__ void lookup_kernel(float* out, const int32_t* ids, const float* table,
                              const uint16_t* table_half, bool bf16, int64_t v_begin,
                              int64_t v_rows, int64_t N, int64_t C) {
  const int64_t total = N * C;
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < total;
       idx += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = idx / C, c = idx % C;
    const int64_t row = static_cast<int64_t>(ids[i]) - v_begin;
    float v = 0.f;
    if (row >= 0 && row < v_rows) {
      if (table_half)
        v = bf16 ? bf16_bits_to_f32(table_half[row * C + c]) : f16_bits_to_f32(table_half[row * C + c]);
      else
        v = table[row * C + c];
    }
    out[idx] = v;
  }
}

__global__ void iota_kernel(int32_t* v, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    v[i] = static_cast<int32_t>(i);
}

// keys sorted ascending, rows[k] the source row of keys[k] (ascending within
// equal keys). The thread of an id's first pair walks all its pairs.
__global__ void scatter_sorted_kernel(float* dtable, const float* dout, const int32_t* keys,
                                      const int32_t* rows, int64_t v_begin, int64_t v_rows,
                                      int64_t N, int64_t C) {
  const int64_t total = N * C;
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < total;
       idx += int64_t{gridDim.x} * blockDim.x) {
    const int64_t k = idx / C, c = idx % C;
    const int32_t id = keys[k];
    if (k > 0 && keys[k - 1] == id) continue;
    const int64_t r = static_cast<int64_t>(id) - v_begin;
    if (r < 0 || r >= v_rows) continue;  // another shard's row
    float acc = dtable[r * C + c];
    for (int64_t k2 = k; k2 < N && keys[k2] == id; ++k2)
      acc += dout[static_cast<int64_t>(rows[k2]) * C + c];
    dtable[r * C + c] = acc;
  }
}

// dtable[id - v_begin] += dout[i] over ids in range, i ascending per row.
void scatter_rows(cudaStream_t stream, float* dtable, const float* dout, const int32_t* ids,
                  int64_t v_begin, int64_t v_rows, int64_t N, int64_t C, const char* name) {
  if (N <= 0 || C <= 0) return;
  MT_OP_CHECK(N <= INT_MAX, name, "more than 2^31 - 1 rows");
  const int n = static_cast<int>(N);
  size_t temp_bytes = 0;
  MT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, ids, static_cast<int32_t*>(nullptr),
                                                static_cast<const int32_t*>(nullptr),
                                                static_cast<int32_t*>(nullptr), n, 0, 32, stream));
  const size_t arrays = (3 * sizeof(int32_t) * N + 255) / 256 * 256;
  Scratch scratch(arrays + temp_bytes, stream);
  int32_t* keys = scratch.as<int32_t>();
  int32_t* rows_in = keys + N;
  int32_t* rows = rows_in + N;
  void* temp = scratch.as<char>() + arrays;
  iota_kernel<<<blocks_for(N), kThreads, 0, stream>>>(rows_in, N);
  MT_CUDA_CHECK_LAUNCH(name);
  MT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, ids, keys, rows_in, rows, n, 0, 32,
                                                stream));
  scatter_sorted_kernel<<<blocks_for(N * C), kThreads, 0, stream>>>(dtable, dout, keys, rows,
                                                                    v_begin, v_rows, N, C);
  MT_CUDA_CHECK_LAUNCH(name);
}

}  // namespace

void encoder_forward(Stream s, float* out, const int32_t* inp, const float* wte, const float* wpe,
                     int64_t B, int64_t T, int64_t C) {
  if (B * T <= 0 || C <= 0) return;
  encoder_forward_kernel<<<blocks_for(B * T * C), kThreads, 0, stream_of(s)>>>(out, inp, wte, wpe,
                                                                               B * T, T, C);
  MT_CUDA_CHECK_LAUNCH("encoder_forward");
}

void encoder_backward(Stream s, float* dwte, float* dwpe, const float* dout, const int32_t* inp,
                      int64_t B, int64_t T, int64_t C) {
  if (B * T <= 0 || C <= 0) return;
  scatter_rows(stream_of(s), dwte, dout, inp, 0, std::numeric_limits<int64_t>::max(), B * T, C,
               "encoder_backward");
  sum_periodic_rows(s, dwpe, dout, B * T, C, T);
}

void embedding_lookup(Stream s, float* out, const int32_t* ids, const float* table,
                      const uint16_t* table_half, HalfFormat fmt, int64_t v_begin, int64_t v_rows,
                      int64_t N, int64_t C) {
  if (N <= 0 || C <= 0) return;
  lookup_kernel<<<blocks_for(N * C), kThreads, 0, stream_of(s)>>>(
      out, ids, table, table_half, fmt == HalfFormat::BF16, v_begin, v_rows, N, C);
  MT_CUDA_CHECK_LAUNCH("embedding_lookup");
}

void embedding_accumulate(Stream s, float* dtable, const float* dout, const int32_t* ids,
                          int64_t v_begin, int64_t v_rows, int64_t N, int64_t C) {
  scatter_rows(stream_of(s), dtable, dout, ids, v_begin, v_rows, N, C, "embedding_accumulate");
}

}  // namespace meshtrain::cuda
