// isa-levels: scalar avx2 avx512
#include "meshtrain/kernels/cpu/reduce.h"
#include "meshtrain/core/isa_dispatch.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace meshtrain::cpu::MT_ISA_NS {

namespace {
constexpr int64_t kChunk = 1 << 16;
}

double sum_squares(const float* x, int64_t n) {
  const int64_t nchunks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(static_cast<size_t>(nchunks), 0.0);
#pragma omp parallel for schedule(static) if (nchunks > 1)
  for (int64_t c = 0; c < nchunks; ++c) {
    const int64_t b = c * kChunk, e = std::min(n, b + kChunk);
    // Float lanes inside a chunk vectorize; chunks are short enough for f32.
    float acc = 0.f;
#pragma omp simd reduction(+ : acc)
    for (int64_t i = b; i < e; ++i) acc += x[i] * x[i];
    partial[c] = acc;
  }
  double s = 0.0;
  for (double p : partial) s += p;
  return s;
}

bool all_finite(const float* x, int64_t n) {
  int bad = 0;
#pragma omp parallel for simd schedule(static) reduction(| : bad) if (n > kChunk)
  for (int64_t i = 0; i < n; ++i) bad |= !std::isfinite(x[i]);
  return bad == 0;
}

}  // namespace meshtrain::cpu::MT_ISA_NS

namespace meshtrain::cpu {

#if MT_ISA_BASELINE
// The public entry points: the variant for active_isa() (core/isa_dispatch.h).
MT_ISA_DECLARE(double sum_squares(const float* x, int64_t n))
MT_ISA_DECLARE(bool all_finite(const float* x, int64_t n))
double sum_squares(const float* x, int64_t n) {
  return MT_ISA_PICK(sum_squares)(x, n);
}
bool all_finite(const float* x, int64_t n) {
  return MT_ISA_PICK(all_finite)(x, n);
}
#endif
}  // namespace meshtrain::cpu
