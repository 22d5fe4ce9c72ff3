#include "meshtrain/nn/vocab_parallel_loss.h"

#include <cmath>
#include <limits>

namespace meshtrain {

int64_t vocab_parallel_cross_entropy_forward(float* losses, float* lse, float* scratch,
                                             const float* logits, const int32_t* targets,
                                             int64_t N, const VocabShard& s,
                                             TensorParallelGroup& group) {
  const int64_t real = s.real();
  // 1. Row max over the whole vocabulary (a shard of padding only offers -inf).
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const float* x = logits + i * s.Vl;
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < real; ++j) m = x[j] > m ? x[j] : m;
    lse[i] = m;
  }
  group.allreduce_max(lse, N);
  // 2. Sum of exp(x - max) and the target's logit (held by one shard), together.
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const float* x = logits + i * s.Vl;
    const float m = lse[i];
    float sum = 0.f;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < real; ++j) sum += std::exp(x[j] - m);
    const int64_t t = targets[i] - s.v_begin;
    scratch[2 * i] = sum;
    scratch[2 * i + 1] = targets[i] >= 0 && t >= 0 && t < real ? x[t] : 0.f;
  }
  group.allreduce_sum(scratch, 2 * N);
  int64_t counted = 0;
  for (int64_t i = 0; i < N; ++i) {
    lse[i] += std::log(scratch[2 * i]);
    if (targets[i] < 0) {
      losses[i] = 0.f;
      continue;
    }
    losses[i] = lse[i] - scratch[2 * i + 1];
    ++counted;
  }
  return counted;
}

void vocab_parallel_cross_entropy_backward(float* logits, const float* lse, const int32_t* targets,
                                           float dloss, int64_t N, const VocabShard& s) {
  const int64_t real = s.real();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    float* x = logits + i * s.Vl;
    if (targets[i] < 0) {
      for (int64_t j = 0; j < s.Vl; ++j) x[j] = 0.f;
      continue;
    }
    const float shift = lse[i];
#pragma omp simd
    for (int64_t j = 0; j < real; ++j) x[j] = dloss * std::exp(x[j] - shift);
    for (int64_t j = real; j < s.Vl; ++j) x[j] = 0.f;
    const int64_t t = targets[i] - s.v_begin;
    if (t >= 0 && t < real) x[t] -= dloss;
  }
}

}  // namespace meshtrain
