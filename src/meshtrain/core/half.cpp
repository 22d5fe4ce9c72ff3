#include "meshtrain/core/half.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

// GCC 12 warns inside its own AVX-512 headers (the _mm512_undefined_* idiom).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace meshtrain {

uint16_t f32_to_f16(float f) {
  uint32_t u = f32_bits(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t absu = u & 0x7fffffffu;
  if (absu > 0x7f800000u)  // NaN: quiet, keep the upper payload bits (as VCVTPS2PH)
    return static_cast<uint16_t>(sign | 0x7e00u | ((absu >> 13) & 0x3ffu));
  if (absu >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (absu < 0x38800000u) {
    // Result is subnormal or zero: scale into integer units of 2^-24 and let
    // the FPU's round-to-nearest-even round it.
    float scaled = bits_f32(absu) * 16777216.0f;  // 2^24, exact
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
  if (exp == 31) {
    if (mant == 0) return bits_f32(sign | 0x7f800000u);
    return bits_f32(sign | 0x7fc00000u | (mant << 13));  // NaN, quieted (as VCVTPH2PS)
  }
  return bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
}

namespace {

#if defined(__x86_64__)
// AVX-512 paths, compiled for those ISAs whatever the build flags and used
// only when the CPU reports them.
#define MT_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,f16c,avx2,fma")))

// bf16 rounding in integer arithmetic: the same bits as the scalar version
// for every input (VCVTNEPS2BF16 would flush subnormals).
MT_AVX512 void f32_to_bf16_avx512(const float* in, uint16_t* out, size_t n) {
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
  const __m512i inf = _mm512_set1_epi32(0x7f800000);
  const __m512i bias = _mm512_set1_epi32(0x7fff);
  const __m512i one = _mm512_set1_epi32(1);
  const __m512i quiet = _mm512_set1_epi32(0x40);
  size_t i = 0;
  auto convert16 = [&](__m512i u) {
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, abs_mask), inf);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), one);
    __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(bias, lsb)), 16);
    __m512i nanv = _mm512_or_si512(_mm512_srli_epi32(u, 16), quiet);
    return _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(nan, rounded, nanv));
  };
  for (; i + 16 <= n; i += 16) {
    __m512i u = _mm512_loadu_si512(in + i);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), convert16(u));
  }
  if (i < n) {
    __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    __m512i u = _mm512_maskz_loadu_epi32(m, in + i);
    _mm256_mask_storeu_epi16(out + i, m, convert16(u));
  }
}

MT_AVX512 void bf16_to_f32_avx512(const uint16_t* in, float* out, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i));
    _mm512_storeu_si512(out + i, _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  if (i < n) {
    __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    __m256i h = _mm256_maskz_loadu_epi16(m, in + i);
    _mm512_mask_storeu_epi32(out + i, m, _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
}

MT_AVX512 void f32_to_f16_avx512(const float* in, uint16_t* out, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i),
                        _mm512_cvtps_ph(_mm512_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT));
  if (i < n) {
    __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm256_mask_storeu_epi16(out + i, m,
                             _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, in + i), _MM_FROUND_TO_NEAREST_INT));
  }
}

MT_AVX512 void f16_to_f32_avx512(const uint16_t* in, float* out, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(out + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i))));
  if (i < n) {
    __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(out + i, m, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, in + i)));
  }
}

// F16C alone (AVX2-era CPUs): 8 at a time, scalar tail.
__attribute__((target("f16c,avx"))) void f32_to_f16_f16c(const float* in, uint16_t* out, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; ++i) out[i] = f32_to_f16(in[i]);
}

__attribute__((target("f16c,avx"))) void f16_to_f32_f16c(const uint16_t* in, float* out, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
  for (; i < n; ++i) out[i] = f16_to_f32(in[i]);
}

bool cpu_has_f16c() {
  static const bool ok = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");
  return ok;
}

bool cpu_has_avx512() {
  static const bool ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("f16c");
  return ok;
}
#else
// No vector conversions off x86-64: the scalar loops below run.
bool cpu_has_f16c() { return false; }
bool cpu_has_avx512() { return false; }
#endif

}  // namespace

const char* half_conversion_isa() {
  return cpu_has_avx512() ? "avx512" : cpu_has_f16c() ? "f16c (bf16 scalar)" : "scalar";
}

void f32_to_bf16(const float* in, uint16_t* out, size_t n) {
#if defined(__x86_64__)
  if (cpu_has_avx512()) return f32_to_bf16_avx512(in, out, n);
#endif
  for (size_t i = 0; i < n; ++i) out[i] = f32_to_bf16(in[i]);
}

void bf16_to_f32(const uint16_t* in, float* out, size_t n) {
#if defined(__x86_64__)
  if (cpu_has_avx512()) return bf16_to_f32_avx512(in, out, n);
#endif
  for (size_t i = 0; i < n; ++i) out[i] = bf16_to_f32(in[i]);
}

void f32_to_f16(const float* in, uint16_t* out, size_t n) {
#if defined(__x86_64__)
  if (cpu_has_avx512()) return f32_to_f16_avx512(in, out, n);
  if (cpu_has_f16c()) return f32_to_f16_f16c(in, out, n);
#endif
  for (size_t i = 0; i < n; ++i) out[i] = f32_to_f16(in[i]);
}

void f16_to_f32(const uint16_t* in, float* out, size_t n) {
#if defined(__x86_64__)
  if (cpu_has_avx512()) return f16_to_f32_avx512(in, out, n);
  if (cpu_has_f16c()) return f16_to_f32_f16c(in, out, n);
#endif
  for (size_t i = 0; i < n; ++i) out[i] = f16_to_f32(in[i]);
}

}  // namespace meshtrain
