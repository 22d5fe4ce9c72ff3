#include "meshtrain/kernels/cpu/vocab_shard_loss.h"

#include <cmath>
#include <limits>

namespace meshtrain::cpu {

void vocab_shard_row_max(float* maxes, const float* logits, int64_t N, int64_t real,
                         int64_t stride) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const float* x = logits + i * stride;
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < real; ++j) m = x[j] > m ? x[j] : m;
    maxes[i] = m;
  }
}

void vocab_shard_sum_exp(float* scratch, const float* logits, const float* maxes,
                         const int32_t* targets, int64_t N, int64_t real, int64_t stride,
                         int64_t v_begin) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const float* x = logits + i * stride;
    const float m = maxes[i];
    float sum = 0.f;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < real; ++j) sum += std::exp(x[j] - m);
    const int64_t t = targets[i] - v_begin;
    scratch[2 * i] = sum;
    scratch[2 * i + 1] = targets[i] >= 0 && t >= 0 && t < real ? x[t] : 0.f;
  }
}

int64_t vocab_shard_losses(float* losses, float* lse, const float* scratch,
                           const int32_t* targets, int64_t N) {
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

void vocab_shard_backward(float* logits, const float* lse, const int32_t* targets, float dloss,
                          int64_t N, int64_t real, int64_t stride, int64_t v_begin) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    float* x = logits + i * stride;
    if (targets[i] < 0) {
      for (int64_t j = 0; j < stride; ++j) x[j] = 0.f;
      continue;
    }
    const float shift = lse[i];
#pragma omp simd
    for (int64_t j = 0; j < real; ++j) x[j] = dloss * std::exp(x[j] - shift);
    for (int64_t j = real; j < stride; ++j) x[j] = 0.f;
    const int64_t t = targets[i] - v_begin;
    if (t >= 0 && t < real) x[t] -= dloss;
  }
}

}  // namespace meshtrain::cpu
