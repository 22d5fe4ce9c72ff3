// Causal multi-head attention on packed qkv (B, T, 3C) on the GPU (semantics
// of kernels/cpu/attention.h: out (B, T, C), lse (B, NH, T) the log-sum-exp of
// the scores scaled by 1/sqrt(hd); dqkv overwritten). `workspace` and
// `nthreads` are the CPU's and ignored here.
#pragma once
#include <cstdint>

#include "meshtrain/core/half.h"
#include "meshtrain/core/stream.h"

namespace meshtrain::cuda {

void attention_forward(Stream s, float* out, float* lse, const float* qkv, int64_t B, int64_t T,
                       int64_t C, int64_t NH, float* workspace, int nthreads);
void attention_backward(Stream s, float* dqkv, const float* dout, const float* qkv,
                        const float* out, const float* lse, int64_t B, int64_t T, int64_t C,
                        int64_t NH, float* workspace, int nthreads);

// The same with the two products on the tensor cores, 16-bit operands (`fmt`)
// and f32 accumulation (attention_tc.cu); head sizes other than 64 and 128
// run the f32 kernels above.
void attention_forward_half(Stream s, HalfFormat fmt, float* out, float* lse, const float* qkv,
                            int64_t B, int64_t T, int64_t C, int64_t NH, float* workspace,
                            int nthreads);
void attention_backward_half(Stream s, HalfFormat fmt, float* dqkv, const float* dout,
                             const float* qkv, const float* out, const float* lse, int64_t B,
                             int64_t T, int64_t C, int64_t NH, float* workspace, int nthreads);

}  // namespace meshtrain::cuda
