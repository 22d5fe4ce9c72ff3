// isa-levels: scalar avx2 avx512
#include "meshtrain/kernels/cpu/elementwise.h"
#include "meshtrain/core/isa_dispatch.h"

#include <cstring>

namespace meshtrain::cpu::MT_ISA_NS {

namespace {
constexpr int64_t kGrain = 16384;
}

void add(float* out, const float* a, const float* b, int64_t n) {
#pragma omp parallel for schedule(static) if (n > kGrain)
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void add_inplace(float* out, const float* a, int64_t n) {
#pragma omp parallel for schedule(static) if (n > kGrain)
  for (int64_t i = 0; i < n; ++i) out[i] += a[i];
}

void scale_inplace(float* x, float s, int64_t n) {
#pragma omp parallel for schedule(static) if (n > kGrain)
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

}  // namespace meshtrain::cpu::MT_ISA_NS

namespace meshtrain::cpu {

#if MT_ISA_BASELINE
void copy(float* out, const float* a, int64_t n) {
  if (n > 0 && out != a) std::memcpy(out, a, sizeof(float) * n);
}

// The public entry points: the variant for active_isa() (core/isa_dispatch.h).
MT_ISA_DECLARE(void add(float* out, const float* a, const float* b, int64_t n))
MT_ISA_DECLARE(void add_inplace(float* out, const float* a, int64_t n))
MT_ISA_DECLARE(void scale_inplace(float* x, float s, int64_t n))
void add(float* out, const float* a, const float* b, int64_t n) {
  MT_ISA_PICK(add)(out, a, b, n);
}
void add_inplace(float* out, const float* a, int64_t n) {
  MT_ISA_PICK(add_inplace)(out, a, n);
}
void scale_inplace(float* x, float s, int64_t n) {
  MT_ISA_PICK(scale_inplace)(x, s, n);
}
#endif
}  // namespace meshtrain::cpu
