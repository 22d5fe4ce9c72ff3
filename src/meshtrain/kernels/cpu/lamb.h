// LAMB's two passes over one layer's contiguous range (formulas in
// kernels/optimizer_hyper.h): the moments and the update's squares, then the
// update scaled by the layer's trust ratio.
#pragma once
#include <cstdint>

#include "meshtrain/kernels/optimizer_hyper.h"

namespace meshtrain::cpu {

using LambHyper = meshtrain::LambHyper;

// Updates m and v; returns the sum of squares of the update u, accumulated
// as sum_squares does (fixed chunks in order: the same result for the same n
// whatever the thread count).
double lamb_moments(const float* grad, float* m, float* v, const float* param, int64_t n,
                    const LambHyper& h);
// param -= step_size * u, u recomputed from m, v and param as lamb_moments did.
void lamb_apply(float* param, const float* m, const float* v, int64_t n, const LambHyper& h,
                float step_size);

}  // namespace meshtrain::cpu
