#include "meshtrain/core/half.h"

#include "meshtrain/core/cpu_isa.h"

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
// for every input (VCVTNEPS2BF16 would flush subnormals). A function of its
// own, not a lambda: a lambda does not inherit the target attribute.
MT_AVX512 inline __m256i bf16_round16(__m512i u) {
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
  const __m512i inf = _mm512_set1_epi32(0x7f800000);
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, abs_mask), inf);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i rounded =
      _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb)), 16);
  const __m512i nanv = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
  return _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(nan, rounded, nanv));
}

MT_AVX512 void f32_to_bf16_avx512(const float* in, uint16_t* out, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i u = _mm512_loadu_si512(in + i);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), bf16_round16(u));
  }
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512i u = _mm512_maskz_loadu_epi32(m, in + i);
    _mm256_mask_storeu_epi16(out + i, m, bf16_round16(u));
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

// F16C (the avx2 level): 8 at a time, scalar tail.
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

#define MT_AVX2 __attribute__((target("avx2,fma,f16c")))

// The same integer rounding as above, 8 at a time: 16 bits of each 32-bit
// lane packed with a shuffle (no 32->16 truncating move before AVX-512).
MT_AVX2 inline __m128i bf16_round8(__m256i u) {
  const __m256i abs = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
  // Signed compare is safe: abs is non-negative as an int32.
  const __m256i nan = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7f800000));
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i rounded =
      _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb)), 16);
  const __m256i nanv = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
  const __m256i r = _mm256_blendv_epi8(rounded, nanv, nan);
  // Each lane holds its result in the low 16 bits (the high ones are zero):
  // packus of the two 128-bit halves gives the 8 results in order.
  return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}

MT_AVX2 void f32_to_bf16_avx2(const float* in, uint16_t* out, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i u = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), bf16_round8(u));
  }
  for (; i < n; ++i) out[i] = f32_to_bf16(in[i]);
}

MT_AVX2 void bf16_to_f32_avx2(const uint16_t* in, float* out, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i),
                        _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  for (; i < n; ++i) out[i] = bf16_to_f32(in[i]);
}

// The conversions follow the dispatch level (MESHTRAIN_ISA caps them too);
// F16C is part of the avx2 level (x86-64-v3).
bool use_avx2() { return active_isa() >= Isa::Avx2; }
bool use_f16c() { return use_avx2(); }
bool use_avx512() { return active_isa() >= Isa::Avx512; }
#else
// No vector conversions off x86-64: the scalar loops below run.
bool use_avx2() { return false; }
bool use_avx512() { return false; }
#endif

}  // namespace

const char* half_conversion_isa() {
  return use_avx512() ? "avx512" : use_avx2() ? "avx2" : "scalar";
}

void f32_to_bf16(const float* in, uint16_t* out, size_t n) {
#if defined(__x86_64__)
  if (use_avx512()) return f32_to_bf16_avx512(in, out, n);
  if (use_avx2()) return f32_to_bf16_avx2(in, out, n);
#endif
  for (size_t i = 0; i < n; ++i) out[i] = f32_to_bf16(in[i]);
}

void bf16_to_f32(const uint16_t* in, float* out, size_t n) {
#if defined(__x86_64__)
  if (use_avx512()) return bf16_to_f32_avx512(in, out, n);
  if (use_avx2()) return bf16_to_f32_avx2(in, out, n);
#endif
  for (size_t i = 0; i < n; ++i) out[i] = bf16_to_f32(in[i]);
}

void f32_to_f16(const float* in, uint16_t* out, size_t n) {
#if defined(__x86_64__)
  if (use_avx512()) return f32_to_f16_avx512(in, out, n);
  if (use_f16c()) return f32_to_f16_f16c(in, out, n);
#endif
  for (size_t i = 0; i < n; ++i) out[i] = f32_to_f16(in[i]);
}

void f16_to_f32(const uint16_t* in, float* out, size_t n) {
#if defined(__x86_64__)
  if (use_avx512()) return f16_to_f32_avx512(in, out, n);
  if (use_f16c()) return f16_to_f32_f16c(in, out, n);
#endif
  for (size_t i = 0; i < n; ++i) out[i] = f16_to_f32(in[i]);
}

}  // namespace meshtrain
