// ReLU, elementwise over n floats.
#pragma once
#include <cstdint>

namespace meshtrain::cpu {

// out = max(inp, 0); out may be inp (in place). NaN stays NaN.
void relu_forward(float* out, const float* inp, int64_t n);
// dinp = out > 0 ? dout : 0, from the forward's OUTPUT (out > 0 exactly where
// inp > 0, so an in-place forward that overwrote its input still has what
// backward needs); the gradient at 0 is 0, as PyTorch's. dinp may be dout.
void relu_backward(float* dinp, const float* dout, const float* out, int64_t n);

}  // namespace meshtrain::cpu
