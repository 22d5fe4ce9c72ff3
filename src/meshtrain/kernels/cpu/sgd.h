// SGD with momentum (and Nesterov), the kernel LARS shares: one pass over a
// contiguous range (formula in kernels/optimizer_hyper.h).
#pragma once
#include <cstdint>

#include "meshtrain/kernels/optimizer_hyper.h"

namespace meshtrain::cpu {

using SgdHyper = meshtrain::SgdHyper;

// buf is unused (may be null) when h.momentum is 0.
void sgd_step(float* param, const float* grad, float* buf, int64_t n, const SgdHyper& h);

}  // namespace meshtrain::cpu
