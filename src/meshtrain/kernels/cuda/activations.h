// GELU (tanh approximation) and SwiGLU on the GPU (semantics of
// kernels/cpu/gelu.h, swiglu.h; gradients overwrite).
#pragma once
#include <cstdint>

#include "meshtrain/core/stream.h"

namespace meshtrain::cuda {

void gelu_forward(Stream s, float* out, const float* inp, int64_t n);
void gelu_backward(Stream s, float* dinp, const float* inp, const float* dout, int64_t n);
// gate_up (N, 2H): row i holds the gate's H values, then the up projection's.
void swiglu_forward(Stream s, float* out, const float* gate_up, int64_t N, int64_t H);
void swiglu_backward(Stream s, float* dgate_up, const float* dout, const float* gate_up,
                     int64_t N, int64_t H);

}  // namespace meshtrain::cuda
