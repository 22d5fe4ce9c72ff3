// RMSNorm over the last dimension (Llama): y = x / sqrt(mean(x^2) + eps) * w.
#pragma once
#include <cstdint>

namespace meshtrain::cpu {

// out, inp (N, C); rstd (N) saved for backward.
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int64_t N,
                     int64_t C, float eps);

// dinp (N, C) += ...; dweight (C) += ... (deterministic reduction order).
void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                      const float* weight, const float* rstd, int64_t N, int64_t C);

}  // namespace meshtrain::cpu
