// Token + position embedding.
#pragma once
#include <cstdint>

namespace meshtrain::cpu {

// out (B,T,C) = wte[inp[b,t]] + wpe[t]. Token ids must be valid (checked by the caller).
void encoder_forward(float* out, const int32_t* inp, const float* wte, const float* wpe,
                     int64_t B, int64_t T, int64_t C);
// dwte[inp[b,t]] += dout[b,t]; dwpe[t] += dout[b,t]. Deterministic: threads
// own disjoint channel ranges and walk tokens in order.
void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* inp, int64_t B,
                      int64_t T, int64_t C);

}  // namespace meshtrain::cpu
