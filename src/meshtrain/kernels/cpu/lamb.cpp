// isa-levels: scalar avx2 avx512
#include "meshtrain/kernels/cpu/lamb.h"
#include "meshtrain/core/isa_dispatch.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace meshtrain::cpu::MT_ISA_NS {

namespace {
constexpr int64_t kChunk = 1 << 16;  // as sum_squares (kernels/cpu/reduce.cpp)

struct Corrections {
  float inv_bc1 = 1.0f, inv_bc2 = 1.0f;
};
Corrections corrections(const LambHyper& h) {
  if (!h.bias_correction) return {};
  const double t = static_cast<double>(h.step);
  return {1.0f / (1.0f - static_cast<float>(std::pow(h.beta1, t))),
          1.0f / (1.0f - static_cast<float>(std::pow(h.beta2, t)))};
}
}  // namespace

double lamb_moments(const float* grad, float* m, float* v, const float* param, int64_t n,
                    const LambHyper& h) {
  const Corrections c = corrections(h);
  const float b1 = h.beta1, b2 = h.beta2, gs = h.grad_scale, eps = h.eps, wd = h.weight_decay;
  const int64_t nchunks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(static_cast<size_t>(nchunks), 0.0);
#pragma omp parallel for schedule(static) if (nchunks > 1)
  for (int64_t k = 0; k < nchunks; ++k) {
    const int64_t b = k * kChunk, e = std::min(n, b + kChunk);
    float acc = 0.f;
#pragma omp simd reduction(+ : acc)
    for (int64_t i = b; i < e; ++i) {
      const float g = grad[i] * gs;
      const float mi = b1 * m[i] + (1.0f - b1) * g;
      const float vi = b2 * v[i] + (1.0f - b2) * g * g;
      m[i] = mi;
      v[i] = vi;
      const float u = (mi * c.inv_bc1) / (std::sqrt(vi * c.inv_bc2) + eps) + wd * param[i];
      acc += u * u;
    }
    partial[static_cast<size_t>(k)] = acc;
  }
  double s = 0.0;
  for (double p : partial) s += p;
  return s;
}

void lamb_apply(float* param, const float* m, const float* v, int64_t n, const LambHyper& h,
                float step_size) {
  const Corrections c = corrections(h);
  const float eps = h.eps, wd = h.weight_decay;
#pragma omp parallel for simd schedule(static) if (n > 32768)
  for (int64_t i = 0; i < n; ++i) {
    const float u = (m[i] * c.inv_bc1) / (std::sqrt(v[i] * c.inv_bc2) + eps) + wd * param[i];
    param[i] -= step_size * u;
  }
}

}  // namespace meshtrain::cpu::MT_ISA_NS

namespace meshtrain::cpu {

#if MT_ISA_BASELINE
// The public entry points: the variant for active_isa() (core/isa_dispatch.h).
MT_ISA_DECLARE(double lamb_moments(const float* grad, float* m, float* v, const float* param, int64_t n, const LambHyper& h))
MT_ISA_DECLARE(void lamb_apply(float* param, const float* m, const float* v, int64_t n, const LambHyper& h, float step_size))
double lamb_moments(const float* grad, float* m, float* v, const float* param, int64_t n,
                    const LambHyper& h) {
  return MT_ISA_PICK(lamb_moments)(grad, m, v, param, n, h);
}
void lamb_apply(float* param, const float* m, const float* v, int64_t n, const LambHyper& h,
                float step_size) {
  MT_ISA_PICK(lamb_apply)(param, m, v, n, h, step_size);
}
#endif
}  // namespace meshtrain::cpu
