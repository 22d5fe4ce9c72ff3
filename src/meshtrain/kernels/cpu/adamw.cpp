// isa-levels: scalar avx2 avx512
#include "meshtrain/kernels/cpu/adamw.h"
#include "meshtrain/core/isa_dispatch.h"

#include <cmath>

namespace meshtrain::cpu::MT_ISA_NS {

void adamw_step(float* param, const float* grad, float* m, float* v, int64_t n,
                const AdamWHyper& h) {
  const float b1 = h.beta1, b2 = h.beta2;
  const float bc1 = 1.0f - static_cast<float>(std::pow(b1, static_cast<double>(h.step)));
  const float bc2 = 1.0f - static_cast<float>(std::pow(b2, static_cast<double>(h.step)));
  const float lr = h.lr, wd = h.weight_decay, eps = h.eps, gs = h.grad_scale;
  const float inv_bc1 = 1.0f / bc1, inv_bc2 = 1.0f / bc2;
#pragma omp parallel for simd schedule(static) if (n > 32768)
  for (int64_t i = 0; i < n; ++i) {
    float g = grad[i] * gs;
    float mi = b1 * m[i] + (1.0f - b1) * g;
    float vi = b2 * v[i] + (1.0f - b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    float mhat = mi * inv_bc1;
    float vhat = vi * inv_bc2;
    param[i] -= lr * (mhat / (std::sqrt(vhat) + eps) + wd * param[i]);
  }
}

}  // namespace meshtrain::cpu::MT_ISA_NS

namespace meshtrain::cpu {

#if MT_ISA_BASELINE
// The public entry points: the variant for active_isa() (core/isa_dispatch.h).
MT_ISA_DECLARE(void adamw_step(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWHyper& h))
void adamw_step(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWHyper& h) {
  MT_ISA_PICK(adamw_step)(param, grad, m, v, n, h);
}
#endif
}  // namespace meshtrain::cpu
