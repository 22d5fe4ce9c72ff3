// bf16 and IEEE f16 conversions, round-to-nearest-even, NaN kept NaN.
// The scalar functions define the results; the bulk functions give the same
// bits for every input (subnormals included), vectorized with AVX-512 or
// AVX2/F16C at the dispatch level (core/cpu_isa.h: chosen at run time, so a
// portable build still uses them, and MESHTRAIN_ISA caps them).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace meshtrain {

// The 16-bit floating formats: GEMM operands, the mixed-precision model's
// compute copies of parameters and activations, gradients on the wire.
enum class HalfFormat : uint8_t { BF16, F16 };

inline uint32_t f32_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float bits_f32(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

// bf16: the top half of the f32 bits, rounded to nearest even. NaN stays NaN
// (quiet bit set, upper payload kept); subnormals round like any other value
// (unlike VCVTNEPS2BF16, which flushes them to zero).
inline uint16_t f32_to_bf16(float f) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
  return static_cast<uint16_t>(u >> 16);
}
inline float bf16_to_f32(uint16_t h) { return bits_f32(static_cast<uint32_t>(h) << 16); }

// f16 as F16C's VCVTPS2PH/VCVTPH2PS do it: overflow rounds to inf, subnormals
// exact, NaN quieted with its upper payload kept.
uint16_t f32_to_f16(float f);
float f16_to_f32(uint16_t h);

void f32_to_bf16(const float* in, uint16_t* out, size_t n);
void bf16_to_f32(const uint16_t* in, float* out, size_t n);
void f32_to_f16(const float* in, uint16_t* out, size_t n);
void f16_to_f32(const uint16_t* in, float* out, size_t n);

// Which code the bulk conversions run now: "avx512", "avx2" or "scalar".
const char* half_conversion_isa();

}  // namespace meshtrain
