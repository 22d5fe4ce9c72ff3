// Causal attention with its own SIMD block kernels instead of one library
// GEMM call per (row block, product): the per-head K and V are packed once
// into 32-column panels, score tiles above the diagonal are never computed,
// and the products run as register-blocked loops straight on the strided
// q/k/v rows. Same contract and results (to rounding) as attention.h; used by
// attention_forward/backward whenever it is available.
#pragma once
#include <cstdint>

namespace meshtrain::cpu {

// True when a fused kernel exists at the active ISA level (active_isa():
// AVX-512, or AVX2 where that variant is built); otherwise the GEMM path runs.
bool attention_fused_available();
// What attention_forward/backward run now: "fused avx512", "fused avx2" or "gemm".
const char* attention_path();

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
