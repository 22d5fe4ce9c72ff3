// core/half.h's scalar conversions as device functions, the same integer
// arithmetic, so the GPU gives the CPU's bits for every input. CUDA-only.
#pragma once
#include <cstdint>

namespace meshtrain::cuda {

__device__ __forceinline__ uint16_t f32_to_bf16_bits(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
  return static_cast<uint16_t>(u >> 16);
}

__device__ __forceinline__ float bf16_bits_to_f32(uint16_t h) {
  return __uint_as_float(static_cast<uint32_t>(h) << 16);
}

__device__ __forceinline__ uint16_t f32_to_f16_bits(float f) {
  const uint32_t u = __float_as_uint(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t absu = u & 0x7fffffffu;
  if (absu > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((absu >> 13) & 0x3ffu));
  if (absu >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (absu < 0x38800000u) {
    // Subnormal or zero: integer units of 2^-24, rounded to nearest even.
    const float scaled = __uint_as_float(absu) * 16777216.0f;  // exact
    const uint32_t m = static_cast<uint32_t>(rintf(scaled));
    return static_cast<uint16_t>(sign | m);
  }
  const uint32_t mant_odd = (absu >> 13) & 1u;
  absu += 0xfffu + mant_odd;
  return static_cast<uint16_t>(sign | ((absu - 0x38000000u) >> 13));
}

__device__ __forceinline__ float f16_bits_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    const float v = static_cast<float>(mant) * (1.0f / 16777216.0f);  // mant * 2^-24, exact
    return sign ? -v : v;
  }
  if (exp == 31) {
    if (mant == 0) return __uint_as_float(sign | 0x7f800000u);
    return __uint_as_float(sign | 0x7fc00000u | (mant << 13));
  }
  return __uint_as_float(sign | ((exp + 112u) << 23) | (mant << 13));
}

}  // namespace meshtrain::cuda
