// LayerNorm over the last dimension (eps 1e-5, as GPT-2).
#pragma once
#include <cstdint>

namespace meshtrain::cpu {

constexpr float kLayerNormEps = 1e-5f;

// out, inp (N, C); mean, rstd (N) saved for backward.
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                       const float* weight, const float* bias, int64_t N, int64_t C);

// dinp (N, C) += ...; dweight, dbias (C) += ... (deterministic reduction order).
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean,
                        const float* rstd, int64_t N, int64_t C);

}  // namespace meshtrain::cpu
