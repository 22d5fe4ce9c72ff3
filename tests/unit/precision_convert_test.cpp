// test-links: mt_kernels
// The vectorized f32 <-> bf16 / f16 conversions give the scalar definitions'
// bits (core/half.h) for every input, special values included.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "meshtrain/core/cpu_isa.h"
#include "meshtrain/core/half.h"
#include "meshtrain/kernels/cpu/convert.h"

using namespace meshtrain;
using namespace meshtrain::cpu;

namespace {
std::vector<float> floats_from_bits(uint64_t begin, size_t n, uint64_t stride = 1) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = bits_f32(static_cast<uint32_t>(begin + i * stride));
  return v;
}
}  // namespace

TEST(precision, conversion_kernels_match_scalar_for_every_16bit_value) {
  std::vector<uint16_t> all(65536);
  for (int i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
  std::vector<float> f(65536);
  bf16_to_f32(all.data(), f.data(), all.size());
  for (int i = 0; i < 65536; ++i) ASSERT_EQ(f32_bits(f[i]), f32_bits(bf16_to_f32(all[i]))) << i;
  f16_to_f32(all.data(), f.data(), all.size());
  for (int i = 0; i < 65536; ++i) ASSERT_EQ(f32_bits(f[i]), f32_bits(f16_to_f32(all[i]))) << i;
  // f16 -> f32 -> f16 is the identity (NaNs come back quieted).
  std::vector<uint16_t> back(65536);
  f32_to_f16(f.data(), back.data(), f.size());
  for (int i = 0; i < 65536; ++i) {
    const bool nan = (i & 0x7c00) == 0x7c00 && (i & 0x3ff);
    ASSERT_EQ(back[i], nan ? (i | 0x200) : i) << i;
  }
}

// Compares the bulk conversions with the scalar ones on `count` f32 bit
// patterns begin, begin + stride, ... in blocks of odd length (vector tails).
void expect_bulk_matches_scalar(uint64_t begin, uint64_t count, uint64_t stride) {
  const size_t block = (1 << 20) + 7;
  std::vector<uint16_t> bf(block), hf(block);
  uint64_t bad_bf = 0, bad_hf = 0;
  for (uint64_t done = 0; done < count; done += block) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(block, count - done));
    std::vector<float> x = floats_from_bits(begin + done * stride, n, stride);
    f32_to_bf16(x.data(), bf.data(), n);
    f32_to_f16(x.data(), hf.data(), n);
    for (size_t i = 0; i < n; ++i) {
      if (bf[i] != f32_to_bf16(x[i]) && bad_bf++ < 5)
        ADD_FAILURE() << "bf16 of 0x" << std::hex << f32_bits(x[i]) << ": " << bf[i] << " vs "
                      << f32_to_bf16(x[i]);
      if (hf[i] != f32_to_f16(x[i]) && bad_hf++ < 5)
        ADD_FAILURE() << "f16 of 0x" << std::hex << f32_bits(x[i]) << ": " << hf[i] << " vs "
                      << f32_to_f16(x[i]);
    }
  }
  EXPECT_EQ(bad_bf, 0u);
  EXPECT_EQ(bad_hf, 0u);
}

// Every 7th of the 2^32 f32 bit patterns (all exponents, signs, NaN payloads,
// both rounding directions), and every pattern of the ranges where the f16
// rounding changes regime: f16 subnormals and the overflow edge.
TEST(precision, conversion_kernels_match_scalar_over_f32_bit_patterns) {
  expect_bulk_matches_scalar(0, ((1ull << 32) + 6) / 7, 7);
  for (uint64_t sign : {0ull, 0x80000000ull}) {
    expect_bulk_matches_scalar(sign | 0x33000000u, 0x38800010u - 0x33000000u, 1);  // f16 subnormal
    expect_bulk_matches_scalar(sign | 0x477fe000u, 0x4000u, 1);                    // f16 overflow
    expect_bulk_matches_scalar(sign | 0x7f7f0000u, 0x00810000u, 1);  // bf16 overflow, inf, NaNs
  }
}

TEST(precision, conversion_special_values) {
  const float inf = std::numeric_limits<float>::infinity();
  const float denorm = std::numeric_limits<float>::denorm_min();
  struct Case {
    float x;
    uint16_t bf16, f16;
  } cases[] = {
      {0.0f, 0x0000, 0x0000},
      {-0.0f, 0x8000, 0x8000},
      {inf, 0x7f80, 0x7c00},
      {-inf, 0xff80, 0xfc00},
      {1.0f, 0x3f80, 0x3c00},
      {1.0f + 1.0f / 256, 0x3f80, 0x3c04},   // bf16 tie -> even
      {1.0f + 3.0f / 256, 0x3f82, 0x3c0c},   // bf16 tie -> even (up)
      {1.0f + 1.0f / 2048, 0x3f80, 0x3c00},  // f16 tie -> even
      {65504.0f, 0x4780, 0x7bff},            // f16 max
      {65520.0f, 0x4780, 0x7c00},            // f16 overflow rounds to inf
      {std::numeric_limits<float>::max(), 0x7f80, 0x7c00},  // bf16 rounds up to inf
      {denorm * 0x10000, 0x0001, 0x0000},    // f32 subnormal: bf16 keeps it (no flush)
      {denorm, 0x0000, 0x0000},
      {std::ldexp(1.0f, -24), 0x3380, 0x0001},  // f16 smallest subnormal
      {std::ldexp(1.0f, -25), 0x3300, 0x0000},  // f16 tie -> even (zero)
      {std::ldexp(3.0f, -26), 0x3340, 0x0001},  // f16 above the tie -> rounds up
  };
  for (const Case& c : cases) {
    std::vector<float> v(37, c.x);  // vector body and tail
    std::vector<uint16_t> b(37), h(37);
    to_half(Half::BF16, v.data(), b.data(), 37);
    to_half(Half::F16, v.data(), h.data(), 37);
    for (int i = 0; i < 37; ++i) {
      ASSERT_EQ(b[i], c.bf16) << c.x << " at " << i;
      ASSERT_EQ(h[i], c.f16) << c.x << " at " << i;
    }
    EXPECT_EQ(f32_to_bf16(c.x), c.bf16) << c.x;
    EXPECT_EQ(f32_to_f16(c.x), c.f16) << c.x;
  }
  // NaNs stay NaNs (quiet, sign and upper payload kept) in both formats.
  for (uint32_t nan_bits : {0x7fc00000u, 0x7f800001u, 0xffa5a5a5u, 0x7fbfffffu}) {
    float x = bits_f32(nan_bits);
    uint16_t b, h;
    f32_to_bf16(&x, &b, 1);
    f32_to_f16(&x, &h, 1);
    EXPECT_TRUE(std::isnan(bf16_to_f32(b))) << std::hex << nan_bits;
    EXPECT_TRUE(std::isnan(f16_to_f32(h))) << std::hex << nan_bits;
    EXPECT_EQ(b >> 15, nan_bits >> 31);
    EXPECT_EQ(h >> 15, nan_bits >> 31);
  }
}

TEST(precision, parallel_conversion_round_trips_large_buffers) {
  const int64_t n = (1 << 18) + 13;  // several chunks, threads, and a ragged end
  std::vector<float> x(n), y(n);
  for (int64_t i = 0; i < n; ++i) x[i] = std::sin(0.001f * i) * std::exp2f(static_cast<float>(i % 40) - 20);
  std::vector<uint16_t> h(n);
  for (Half fmt : {Half::BF16, Half::F16}) {
    to_half(fmt, x.data(), h.data(), n);
    from_half(fmt, h.data(), y.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t want = fmt == Half::BF16 ? f32_to_bf16(x[i]) : f32_to_f16(x[i]);
      ASSERT_EQ(h[i], want) << i;
      ASSERT_EQ(y[i], fmt == Half::BF16 ? bf16_to_f32(want) : f16_to_f32(want)) << i;
    }
  }
}

TEST(precision, conversion_kernels_report_their_isa) {
  // The conversions follow the dispatch level (MESHTRAIN_ISA may cap it).
  const std::string isa = half_conversion_isa();
  const Isa level = active_isa();
  EXPECT_EQ(isa, level >= Isa::Avx512 ? "avx512" : level >= Isa::Avx2 ? "avx2" : "scalar");
}
