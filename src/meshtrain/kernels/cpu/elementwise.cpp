#include "meshtrain/kernels/cpu/elementwise.h"

#include <cstring>

namespace meshtrain::cpu {

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

void copy(float* out, const float* a, int64_t n) {
  if (n > 0 && out != a) std::memcpy(out, a, sizeof(float) * n);
}

}  // namespace meshtrain::cpu
