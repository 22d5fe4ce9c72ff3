// Causal attention with its own AVX-512 block kernels instead of one library
// GEMM call per (row block, product): the per-head K and V are packed once
// into 32-column panels, score tiles above the diagonal are never computed,
// and the products run as register-blocked loops straight on the strided
// q/k/v rows. Same contract and results (to rounding) as attention.h; used by
// attention_forward/backward whenever it is available.
#pragma once
#include <cstdint>

namespace meshtrain::cpu {

// True when this build has the AVX-512 kernels (compiled with AVX-512F).
bool attention_fused_available();

// Floats of scratch per thread (the largest of forward and backward).
int64_t attention_fused_workspace_floats(int64_t T, int64_t hd);

void attention_forward_fused(float* out, float* lse, const float* qkv, int64_t B, int64_t T,
                             int64_t C, int64_t NH, float* workspace, int nthreads);

void attention_backward_fused(float* dqkv, const float* dout, const float* qkv, const float* out,
                              const float* lse, int64_t B, int64_t T, int64_t C, int64_t NH,
                              float* workspace, int nthreads);

// The library-GEMM path (any CPU); exposed so tests compare the two.
void attention_forward_gemm(float* out, float* lse, const float* qkv, int64_t B, int64_t T,
                            int64_t C, int64_t NH, float* workspace, int nthreads);
void attention_backward_gemm(float* dqkv, const float* dout, const float* qkv, const float* out,
                             const float* lse, int64_t B, int64_t T, int64_t C, int64_t NH,
                             float* workspace, int nthreads);

}  // namespace meshtrain::cpu
