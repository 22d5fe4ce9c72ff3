// isa-levels: scalar avx2 avx512
#include "meshtrain/kernels/cpu/sgd.h"
#include "meshtrain/core/isa_dispatch.h"

namespace meshtrain::cpu::MT_ISA_NS {

void sgd_step(float* param, const float* grad, float* buf, int64_t n, const SgdHyper& h) {
  const float gs = h.grad_scale, wd = h.weight_decay, trust = h.trust, lr = h.lr;
  const float mu = h.momentum, damp = 1.0f - h.dampening;
  if (mu == 0.0f) {
#pragma omp parallel for simd schedule(static) if (n > 32768)
    for (int64_t i = 0; i < n; ++i) param[i] -= lr * ((grad[i] * gs + wd * param[i]) * trust);
    return;
  }
  const bool first = h.first, nesterov = h.nesterov;
#pragma omp parallel for simd schedule(static) if (n > 32768)
  for (int64_t i = 0; i < n; ++i) {
    const float g = (grad[i] * gs + wd * param[i]) * trust;
    const float b = first ? g : mu * buf[i] + damp * g;
    buf[i] = b;
    param[i] -= lr * (nesterov ? g + mu * b : b);
  }
}

}  // namespace meshtrain::cpu::MT_ISA_NS

namespace meshtrain::cpu {

#if MT_ISA_BASELINE
// The public entry point: the variant for active_isa() (core/isa_dispatch.h).
MT_ISA_DECLARE(void sgd_step(float* param, const float* grad, float* buf, int64_t n, const SgdHyper& h))
void sgd_step(float* param, const float* grad, float* buf, int64_t n, const SgdHyper& h) {
  MT_ISA_PICK(sgd_step)(param, grad, buf, n, h);
}
#endif
}  // namespace meshtrain::cpu
