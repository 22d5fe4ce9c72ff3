// SwiGLU (Llama's MLP gate): out = silu(gate) * up, silu(g) = g * sigmoid(g).
// gate_up (N, 2H) holds each row's gate (first H) and up (last H) halves,
// as one GEMM with the stacked [gate_proj; up_proj] weight produces them.
#pragma once
#include <cstdint>

namespace meshtrain::cpu {

// out (N, H).
void swiglu_forward(float* out, const float* gate_up, int64_t N, int64_t H);

// dgate_up (N, 2H) is overwritten; it may not overlap gate_up or dout.
void swiglu_backward(float* dgate_up, const float* dout, const float* gate_up, int64_t N, int64_t H);

}  // namespace meshtrain::cpu
