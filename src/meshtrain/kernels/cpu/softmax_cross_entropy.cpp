// isa-levels: scalar avx2 avx512
#include "meshtrain/kernels/cpu/softmax_cross_entropy.h"
#include "meshtrain/core/isa_dispatch.h"

#include <cmath>

#include "meshtrain/kernels/cpu/vec_math.h"

namespace meshtrain::cpu::MT_ISA_NS {

namespace {
// Returns max and log(sum(exp(x - max))) of a row.
inline void row_logsumexp(const float* x, int64_t V, float& mx, float& lse) {
  float m = -INFINITY;  // a max is exact in any order: vectorized
#pragma omp simd reduction(max : m)
  for (int64_t j = 0; j < V; ++j) m = x[j] > m ? x[j] : m;
  mx = m;
  float s = 0.f;
#pragma omp simd reduction(+ : s)
  for (int64_t j = 0; j < V; ++j) s += fast_expf(x[j] - mx);
  lse = std::log(s);
}
}  // namespace

int64_t softmax_cross_entropy_forward(float* losses, const float* logits, const int32_t* targets,
                                      int64_t N, int64_t V, int64_t Vp) {
  int64_t counted = 0;
#pragma omp parallel for schedule(static) reduction(+ : counted)
  for (int64_t i = 0; i < N; ++i) {
    const int32_t t = targets[i];
    if (t < 0) {
      losses[i] = 0.f;
      continue;
    }
    const float* x = logits + i * Vp;
    float mx, lse;
    row_logsumexp(x, V, mx, lse);
    losses[i] = lse + mx - x[t];
    ++counted;
  }
  return counted;
}

void softmax_cross_entropy_backward(float* logits, const int32_t* targets, float dloss, int64_t N,
                                    int64_t V, int64_t Vp) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    float* x = logits + i * Vp;
    const int32_t t = targets[i];
    if (t < 0) {
      for (int64_t j = 0; j < Vp; ++j) x[j] = 0.f;
      continue;
    }
    float mx, lse;
    row_logsumexp(x, V, mx, lse);
    const float shift = mx + lse;
#pragma omp simd
    for (int64_t j = 0; j < V; ++j) x[j] = dloss * fast_expf(x[j] - shift);
    for (int64_t j = V; j < Vp; ++j) x[j] = 0.f;
    x[t] -= dloss;
  }
}

}  // namespace meshtrain::cpu::MT_ISA_NS

namespace meshtrain::cpu {

#if MT_ISA_BASELINE
// The public entry points: the variant for active_isa() (core/isa_dispatch.h).
MT_ISA_DECLARE(int64_t softmax_cross_entropy_forward(float* losses, const float* logits, const int32_t* targets, int64_t N, int64_t V, int64_t Vp))
MT_ISA_DECLARE(void softmax_cross_entropy_backward(float* logits, const int32_t* targets, float dloss, int64_t N, int64_t V, int64_t Vp))
int64_t softmax_cross_entropy_forward(float* losses, const float* logits, const int32_t* targets, int64_t N, int64_t V, int64_t Vp) {
  return MT_ISA_PICK(softmax_cross_entropy_forward)(losses, logits, targets, N, V, Vp);
}
void softmax_cross_entropy_backward(float* logits, const int32_t* targets, float dloss, int64_t N, int64_t V, int64_t Vp) {
  MT_ISA_PICK(softmax_cross_entropy_backward)(logits, targets, dloss, N, V, Vp);
}
#endif
}  // namespace meshtrain::cpu
