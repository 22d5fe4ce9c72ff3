// One thread per output element. The fold sums a shared head's query heads
// in head order from zero, as the CPU: the same bits.
#include "meshtrain/kernels/cuda/cuda_common.cuh"
#include "meshtrain/kernels/cuda/kv_heads.h"

namespace meshtrain::cuda {

namespace {

__global__ void expand_kernel(float* full, const float* qkv, int64_t N, int64_t C, int64_t KV,
                              int64_t hd, int64_t rep) {
  const int64_t Q = C + 2 * KV, total = N * 3 * C;
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < total;
       idx += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = idx / (3 * C), col = idx % (3 * C);
    const float* src = qkv + i * Q;
    if (col < C) {
      full[idx] = src[col];
    } else {
      const int64_t part = (col - C) / C, within = (col - C) % C;  // part 0: k, 1: v
      const int64_t kvh = within / hd / rep, d = within % hd;
      full[idx] = src[C + part * KV + kvh * hd + d];
    }
  }
}

__global__ void fold_kernel(float* dqkv, const float* dfull, int64_t N, int64_t C, int64_t KV,
                            int64_t hd, int64_t rep) {
  const int64_t Q = C + 2 * KV, total = N * Q;
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < total;
       idx += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = idx / Q, col = idx % Q;
    const float* src = dfull + i * 3 * C;
    if (col < C) {
      dqkv[idx] = src[col];
    } else {
      const int64_t part = (col - C) / KV, within = (col - C) % KV;
      const int64_t kvh = within / hd, d = within % hd;
      float acc = 0.f;
      for (int64_t h = kvh * rep; h < (kvh + 1) * rep; ++h) acc += src[C + part * C + h * hd + d];
      dqkv[idx] = acc;
    }
  }
}

void check(int64_t NH, int64_t NKV, const char* name) {
  MT_OP_CHECK(NKV > 0 && NH % NKV == 0, name, "NH query heads do not split into NKV groups");
}

}  // namespace

void expand_kv_heads(Stream s, float* full, const float* qkv, int64_t N, int64_t NH, int64_t NKV,
                     int64_t hd) {
  if (N <= 0 || NH <= 0 || hd <= 0) return;
  check(NH, NKV, "expand_kv_heads");
  expand_kernel<<<blocks_for(N * 3 * NH * hd), kThreads, 0, stream_of(s)>>>(
      full, qkv, N, NH * hd, NKV * hd, hd, NH / NKV);
  MT_CUDA_CHECK_LAUNCH("expand_kv_heads");
}

void fold_kv_heads(Stream s, float* dqkv, const float* dfull, int64_t N, int64_t NH, int64_t NKV,
                   int64_t hd) {
  if (N <= 0 || NH <= 0 || hd <= 0) return;
  check(NH, NKV, "fold_kv_heads");
  fold_kernel<<<blocks_for(N * (NH + 2 * NKV) * hd), kThreads, 0, stream_of(s)>>>(
      dqkv, dfull, N, NH * hd, NKV * hd, hd, NH / NKV);
  MT_CUDA_CHECK_LAUNCH("fold_kv_heads");
}

}  // namespace meshtrain::cuda
