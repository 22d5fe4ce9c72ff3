// GELU with the tanh approximation (GPT-2's).
#pragma once
#include <cstdint>

namespace meshtrain::cpu {

void gelu_forward(float* out, const float* inp, int64_t n);
// dinp = dout * gelu'(inp); dinp may alias dout.
void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n);

}  // namespace meshtrain::cpu
