// Causal multi-head self-attention on a packed qkv tensor, flash-style: the
// forward keeps only each row's log-sum-exp, and the backward recomputes the
// probabilities. At most one head's block of Tb x T scores per thread exists
// at a time.
#pragma once
#include <cstdint>

#include "meshtrain/core/half.h"

namespace meshtrain::cpu {

constexpr int64_t kAttentionRowBlock = 64;
// Score columns per packed K/V panel of the fused kernels (two AVX-512 or four
// AVX2 vectors); it sets the workspace size, so every variant shares it.
constexpr int64_t kAttentionPanel = 32;

// Floats of scratch each thread needs for sequence length T and head size hd.
int64_t attention_workspace_floats(int64_t T, int64_t hd);

// qkv (B,T,3C) with q,k,v each split into NH heads of hd = C/NH channels.
// out (B,T,C); lse (B,NH,T). workspace holds nthreads * attention_workspace_floats.
void attention_forward(float* out, float* lse, const float* qkv, int64_t B, int64_t T, int64_t C,
                       int64_t NH, float* workspace, int nthreads);

// dqkv (B,T,3C) is overwritten; it must not overlap qkv, out or dout (they
// are read in place while it is written). out and lse are the forward's results.
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                        const float* lse, int64_t B, int64_t T, int64_t C, int64_t NH,
                        float* workspace, int nthreads);

// Mixed precision's entries (KernelTable::attention_*_half): the CPU computes
// the products in f32, which the 16-bit contract allows.
inline void attention_forward_half(HalfFormat, float* out, float* lse, const float* qkv, int64_t B,
                                   int64_t T, int64_t C, int64_t NH, float* workspace,
                                   int nthreads) {
  attention_forward(out, lse, qkv, B, T, C, NH, workspace, nthreads);
}
inline void attention_backward_half(HalfFormat, float* dqkv, const float* dout, const float* qkv,
                                    const float* out, const float* lse, int64_t B, int64_t T,
                                    int64_t C, int64_t NH, float* workspace, int nthreads) {
  attention_backward(dqkv, dout, qkv, out, lse, B, T, C, NH, workspace, nthreads);
}

}  // namespace meshtrain::cpu
