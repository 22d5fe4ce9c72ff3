// Causal attention whose two products run on the tensor cores with 16-bit
// operands (bf16 or fp16) and f32 accumulation (WMMA 16x16x16), for mixed
// precision: the f32 activations are rounded as each tile is loaded, the
// softmax, its running statistics and every output stay f32. Head sizes 64
// and 128; any other goes to the f32 kernels of attention.cu.
//
// Tiles of 64 query and 64 key rows; four warps, each owning 16 rows of the
// block's tile. A warp's products land in its own shared-memory strip, its
// lanes (two per row, 32 columns each) apply the scale, the causal mask and
// the softmax there, and round P (or dS) for the next product.
//
// Forward (one block per query tile): S = Q K^T, online softmax (running max
// m and sum l per row, the output accumulator rescaled by exp(m_old - m_new)
// in shared memory), O += P V; out = O / l, lse = m + log l.
// Backward (FlashAttention-2's split, no atomics, every sum in a fixed
// order): with P = exp(scale S - lse), D_i = dO_i . O_i (f32, from the f32
// out and dout), dS = P (dO V^T - D):
//   dq kernel, one block per query tile over the key tiles up to it:
//     dQ = scale dS K;
//   dkv kernel, one block per key tile over the query tiles from it:
//     dV = P^T dO, dK = scale dS^T Q (the warp computes S^T and dP^T directly).
#include <cmath>

#include "meshtrain/kernels/cuda/attention.h"
#include "meshtrain/kernels/cuda/attention_launch.cuh"
#include "meshtrain/kernels/cuda/attention_tc_kernels.cuh"
#include "meshtrain/kernels/cuda/cuda_common.cuh"

namespace meshtrain::cuda {

namespace {

using namespace attention_tc;

dim3 tc_grid(int64_t B, int64_t T, int64_t NH) {
  return dim3(static_cast<unsigned>((T + kRows - 1) / kRows), static_cast<unsigned>(NH),
              static_cast<unsigned>(B));
}

template <typename E, int HD>
void forward_tc(cudaStream_t stream, float* out, float* lse, const float* qkv, int64_t B,
                int64_t T, int64_t C, int64_t NH, float scale) {
  const size_t bytes = ForwardSmem<E, HD>::bytes;
  attention_prepare_smem(reinterpret_cast<const void*>(&attention_forward_tc_kernel<E, HD>), bytes,
                         "attention_forward_half");
  attention_forward_tc_kernel<E, HD><<<tc_grid(B, T, NH), kTcThreads, bytes, stream>>>(
      out, lse, qkv, T, C, NH, scale);
  MT_CUDA_CHECK_LAUNCH("attention_forward_half");
}

template <typename E, int HD>
void backward_tc(cudaStream_t stream, float* dqkv, const float* dout, const float* qkv,
                 const float* out, const float* lse, int64_t B, int64_t T, int64_t C, int64_t NH,
                 float scale) {
  const size_t bytes = BackwardSmem<E, HD>::bytes;
  attention_prepare_smem(reinterpret_cast<const void*>(&attention_backward_dq_tc_kernel<E, HD>),
                         bytes, "attention_backward_half");
  attention_backward_dq_tc_kernel<E, HD><<<tc_grid(B, T, NH), kTcThreads, bytes, stream>>>(
      dqkv, dout, qkv, out, lse, T, C, NH, scale);
  MT_CUDA_CHECK_LAUNCH("attention_backward_half (dq)");
  attention_prepare_smem(reinterpret_cast<const void*>(&attention_backward_dkv_tc_kernel<E, HD>),
                         bytes, "attention_backward_half");
  attention_backward_dkv_tc_kernel<E, HD><<<tc_grid(B, T, NH), kTcThreads, bytes, stream>>>(
      dqkv, dout, qkv, out, lse, T, C, NH, scale);
  MT_CUDA_CHECK_LAUNCH("attention_backward_half (dk, dv)");
}

// The tensor-core kernels take these head sizes.
bool tc_head_size(int64_t hd) { return hd == 64 || hd == 128; }

}  // namespace

void attention_forward_half(Stream s, HalfFormat fmt, float* out, float* lse, const float* qkv,
                            int64_t B, int64_t T, int64_t C, int64_t NH, float* workspace,
                            int nthreads) {
  if (B <= 0 || T <= 0) return;
  attention_check_shapes(B, T, C, NH, kRows, "attention_forward_half");
  const int64_t hd = C / NH;
  if (!tc_head_size(hd))
    return attention_forward(s, out, lse, qkv, B, T, C, NH, workspace, nthreads);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const cudaStream_t st = stream_of(s);
  const bool bf = fmt == HalfFormat::BF16;
  if (hd == 64)
    bf ? forward_tc<__nv_bfloat16, 64>(st, out, lse, qkv, B, T, C, NH, scale)
       : forward_tc<__half, 64>(st, out, lse, qkv, B, T, C, NH, scale);
  else
    bf ? forward_tc<__nv_bfloat16, 128>(st, out, lse, qkv, B, T, C, NH, scale)
       : forward_tc<__half, 128>(st, out, lse, qkv, B, T, C, NH, scale);
}

void attention_backward_half(Stream s, HalfFormat fmt, float* dqkv, const float* dout,
                             const float* qkv, const float* out, const float* lse, int64_t B,
                             int64_t T, int64_t C, int64_t NH, float* workspace, int nthreads) {
  if (B <= 0 || T <= 0) return;
  attention_check_shapes(B, T, C, NH, kRows, "attention_backward_half");
  const int64_t hd = C / NH;
  if (!tc_head_size(hd))
    return attention_backward(s, dqkv, dout, qkv, out, lse, B, T, C, NH, workspace, nthreads);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const cudaStream_t st = stream_of(s);
  const bool bf = fmt == HalfFormat::BF16;
  if (hd == 64)
    bf ? backward_tc<__nv_bfloat16, 64>(st, dqkv, dout, qkv, out, lse, B, T, C, NH, scale)
       : backward_tc<__half, 64>(st, dqkv, dout, qkv, out, lse, B, T, C, NH, scale);
  else
    bf ? backward_tc<__nv_bfloat16, 128>(st, dqkv, dout, qkv, out, lse, B, T, C, NH, scale)
       : backward_tc<__half, 128>(st, dqkv, dout, qkv, out, lse, B, T, C, NH, scale);
}

}  // namespace meshtrain::cuda
