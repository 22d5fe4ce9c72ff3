// Branch-free float math that compilers vectorize (no libm calls in hot loops).
#pragma once
#include <cstdint>
#include <cstring>

namespace meshtrain::cpu {

// exp(x) to ~2 ulp for x already in [-87, 88] (no clamp: callers that
// bound x themselves skip the compares and blends, ~25% of a GELU).
[[gnu::always_inline]] static inline float expf_in_range(float x) {
  const float log2e = 1.44269504088896341f;
  float n = __builtin_rintf(x * log2e);
  // r = x - n*ln2 with ln2 split in two parts for accuracy.
  float r = x - n * 0.693145751953125f;
  r = r - n * 1.428606765330187045e-06f;
  // exp(r) on [-ln2/2, ln2/2], degree-6 Taylor-like minimax coefficients.
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  int32_t e = static_cast<int32_t>(n) + 127;
  uint32_t bits = static_cast<uint32_t>(e) << 23;
  float scale;
  std::memcpy(&scale, &bits, 4);
  return p * scale;
}

// exp(x) to ~2 ulp for x in [-87, 88]; smaller x flushes toward 0, larger clamps.
[[gnu::always_inline]] static inline float fast_expf(float x) {
  x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  return expf_in_range(x);
}

}  // namespace meshtrain::cpu
