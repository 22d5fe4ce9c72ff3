// Fused AdamW step over a contiguous range: decoupled weight decay, bias
// correction, gradient pre-scaling (for clipping/unscaling) in one pass.
#pragma once
#include <cstdint>

#include "meshtrain/kernels/adamw_hyper.h"

namespace meshtrain::cpu {

using AdamWHyper = meshtrain::AdamWHyper;

// param -= lr * (mhat / (sqrt(vhat) + eps) + weight_decay * param)
void adamw_step(float* param, const float* grad, float* m, float* v, int64_t n,
                const AdamWHyper& h);

}  // namespace meshtrain::cpu
