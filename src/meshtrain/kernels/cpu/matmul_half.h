// Linear layers of the mixed-precision model: 16-bit (bf16 or f16) inputs and
// weights, f32 outputs, biases and gradients (kernels/cpu/gemm_bf16.h runs
// the products). The f32 counterparts are in matmul.h.
#pragma once
#include <cstdint>

#include "meshtrain/kernels/cpu/gemm_bf16.h"

namespace meshtrain::cpu {

// out (N, OC) = inp (N, C) @ weight^T + bias; inp and weight in `fmt`, bias
// and out f32. accumulate: add to what `out` holds (fused residual adds).
void matmul_forward_half(Half fmt, float* out, const uint16_t* inp, const uint16_t* weight,
                         const float* bias, int64_t N, int64_t C, int64_t OC,
                         bool accumulate = false);

// dout (N, OC) f32 is rounded once into dout_half (N*OC scratch), then
// dinp (N, C) = dout @ weight (overwritten, or added when accumulate_dinp),
// dweight (OC, C) += dout^T @ inp (f32 accumulation into the f32 gradient),
// dbias (OC) += column sums of the f32 dout. dinp/dweight/dbias may be null.
void matmul_backward_half(Half fmt, float* dinp, float* dweight, float* dbias, const float* dout,
                          uint16_t* dout_half, const uint16_t* inp, const uint16_t* weight,
                          int64_t N, int64_t C, int64_t OC, bool accumulate_dinp = false);

// dweight (OC, C) += dout_half^T @ inp from an output gradient that
// matmul_backward_half already rounded into dout_half: its weight-gradient
// product alone, for a caller that computes it later (the same GEMM).
void matmul_backward_weight_half(Half fmt, float* dweight, const uint16_t* dout_half,
                                 const uint16_t* inp, int64_t N, int64_t C, int64_t OC);

}  // namespace meshtrain::cpu
