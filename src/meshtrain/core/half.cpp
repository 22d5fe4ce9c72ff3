#include "meshtrain/core/half.h"

#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace meshtrain {

uint16_t f32_to_f16(float f) {
  uint32_t u = f32_bits(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t absu = u & 0x7fffffffu;
  if (absu > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (absu >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (absu < 0x38800000u) {
    // Result is subnormal or zero: scale into integer units of 2^-24 and round.
    float a = bits_f32(absu);
    // Adding 0.5 (as 2^-1) aligned: use the FPU's round-to-nearest-even.
    float scaled = a * 16777216.0f;  // 2^24, exact
    uint32_t m = static_cast<uint32_t>(__builtin_rintf(scaled));
    return static_cast<uint16_t>(sign | m);
  }
  // Normal: rebias exponent (127 -> 15) and round the mantissa to 10 bits.
  uint32_t mant_odd = (absu >> 13) & 1u;
  absu += 0xfffu + mant_odd;
  uint32_t h = ((absu - 0x38000000u) >> 13);
  return static_cast<uint16_t>(sign | h);
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    float v = static_cast<float>(mant) * (1.0f / 16777216.0f);  // subnormal: mant * 2^-24
    return sign ? -v : v;
  }
  if (exp == 31) return bits_f32(sign | 0x7f800000u | (mant << 13));
  return bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
}

void f32_to_bf16(const float* in, uint16_t* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = f32_to_bf16(in[i]);
}
void bf16_to_f32(const uint16_t* in, float* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = bf16_to_f32(in[i]);
}

void f32_to_f16(const float* in, uint16_t* out, size_t n) {
  size_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(in + i);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
#endif
  for (; i < n; ++i) out[i] = f32_to_f16(in[i]);
}

void f16_to_f32(const uint16_t* in, float* out, size_t n) {
  size_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8) {
    __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(v));
  }
#endif
  for (; i < n; ++i) out[i] = f16_to_f32(in[i]);
}

}  // namespace meshtrain
