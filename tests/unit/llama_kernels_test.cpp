// Llama's kernels against naive references and finite differences, odd
// shapes included: RMSNorm, SwiGLU and the rotary embedding (forward and
// backward; the rotary backward is the transpose of its forward).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "gradcheck.h"
#include "meshtrain/kernels/cpu/rmsnorm.h"
#include "meshtrain/kernels/cpu/rope.h"
#include "meshtrain/kernels/cpu/swiglu.h"

using namespace meshtrain;
using namespace meshtrain::cpu;
using meshtrain::testing::dot;
using meshtrain::testing::expect_gradient;
using meshtrain::testing::randn;

TEST(llama_kernels, rmsnorm_matches_naive_and_finite_differences) {
  for (auto [N, C] : {std::pair<int64_t, int64_t>{5, 7}, {3, 64}, {70, 33}}) {
    std::vector<float> x = randn(N * C, 1), w = randn(C, 2), dy = randn(N * C, 3);
    for (auto& v : w) v += 1.0f;
    std::vector<float> y(N * C), rstd(N);
    rmsnorm_forward(y.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5f);
    for (int64_t i = 0; i < N; ++i) {
      double ss = 0;
      for (int64_t c = 0; c < C; ++c) ss += double(x[i * C + c]) * x[i * C + c];
      const double r = 1.0 / std::sqrt(ss / C + 1e-5);
      // r's relative error is at most C 2^-24 / 2 (an f32 sum of C <= 64
      // squares, halved by the square root) plus the products' ulp: ~2.5e-6
      // of |y| <= 7 in the worst case, 1.8e-5; the sum's actual rounding is
      // a random walk far below that. Measured 6.5e-7 (1.4 ulp of 6.88),
      // at most 6.5% of the bound at the scalar, avx2 and avx512 levels.
      for (int64_t c = 0; c < C; ++c)
        ASSERT_NEAR(y[i * C + c], x[i * C + c] * r * w[c], 1e-5) << N << "x" << C;
    }
    std::vector<float> dx(N * C, 0.5f), dw(C, 0.25f);  // both accumulate
    rmsnorm_backward(dx.data(), dw.data(), dy.data(), x.data(), w.data(), rstd.data(), N, C);
    for (auto& v : dx) v -= 0.5f;
    for (auto& v : dw) v -= 0.25f;
    auto loss = [&] {
      std::vector<float> yy(N * C), rr(N);
      rmsnorm_forward(yy.data(), rr.data(), x.data(), w.data(), N, C, 1e-5f);
      return dot(dy, yy.data());
    };
    // Defaults (gradcheck.h); measured |a-n| <= 1.7e-4 (dx: x feeds its
    // whole row through r), at most 4.5% of the tolerance.
    expect_gradient("rmsnorm dx", x, dx, loss);
    expect_gradient("rmsnorm dw", w, dw, loss);
  }
}

TEST(llama_kernels, swiglu_matches_naive_and_finite_differences) {
  for (auto [N, H] : {std::pair<int64_t, int64_t>{3, 5}, {17, 40}, {4, 129}}) {
    std::vector<float> gu = randn(N * 2 * H, 4, 2.0f), dy = randn(N * H, 5);
    gu[0] = -95.0f;  // far into exp's clamp: silu -> 0 without NaN
    std::vector<float> y(N * H);
    swiglu_forward(y.data(), gu.data(), N, H);
    for (int64_t i = 0; i < N; ++i)
      for (int64_t j = 0; j < H; ++j) {
        const double g = gu[i * 2 * H + j], u = gu[i * 2 * H + H + j];
        // Elementwise: the fast exp (<= 3 ulp), a division and two products,
        // ~6 x 2^-24 = 3.6e-7 relative, under 1e-6 of (1 + |g u|) (|y| <=
        // |g u|; the 1 covers gu[0]'s clamped silu, 0 for ~1e-40). Measured
        // 1.3e-6 at g u = 13.6 (1.3 ulp of y = 12.3), 9% of the bound, at the
        // scalar, avx2 and avx512 levels.
        ASSERT_NEAR(y[i * H + j], g / (1.0 + std::exp(-g)) * u, 1e-6 * (1 + std::fabs(g * u)));
      }
    std::vector<float> dgu(N * 2 * H, 123.0f);  // overwritten
    swiglu_backward(dgu.data(), dy.data(), gu.data(), N, H);
    gu[0] = 0.3f;
    swiglu_backward(dgu.data(), dy.data(), gu.data(), N, H);
    // Defaults (gradcheck.h); measured |a-n| <= 8e-6, under 1% of the tolerance.
    expect_gradient("swiglu", gu, dgu, [&] {
      std::vector<float> yy(N * H);
      swiglu_forward(yy.data(), gu.data(), N, H);
      return dot(dy, yy.data());
    });
  }
}

TEST(llama_kernels, rope_matches_the_rotate_half_formula_and_backward_is_its_transpose) {
  const int64_t B = 2, T = 7, nh = 3, hd = 10, stride = nh * hd + 4;  // padded rows
  const RopeTable table = rope_table(9, hd, 10000.0);
  std::vector<float> x = randn(B * T * stride, 6), y = x;
  rope_forward(y.data(), B, T, nh, hd, stride, table);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < nh; ++h)
        for (int64_t j = 0; j < hd / 2; ++j) {
          const double ang = t * std::pow(10000.0, -2.0 * j / hd);
          const int64_t at = (b * T + t) * stride + h * hd;
          const double a = x[at + j], c = x[at + j + hd / 2];
          // f32 cos/sin table entries (2^-24 each) and two products and a sum:
          // ~3 x 2^-24 (|a| + |c|) <= 1.1e-6 for |a|, |c| <= 3. Measured 2.7e-7.
          ASSERT_NEAR(y[at + j], a * std::cos(ang) - c * std::sin(ang), 1e-5);
          ASSERT_NEAR(y[at + j + hd / 2], c * std::cos(ang) + a * std::sin(ang), 1e-5);
        }
  // Channels beyond the heads are untouched.
  for (int64_t r = 0; r < B * T; ++r)
    for (int64_t k = nh * hd; k < stride; ++k) ASSERT_EQ(y[r * stride + k], x[r * stride + k]);
  // <R x, d> == <x, R^T d>.
  std::vector<float> d = randn(B * T * stride, 7), rd = d;
  rope_backward(rd.data(), B, T, nh, hd, stride, table);
  // Double dots over 476 values of f32 results, each within ~3 x 2^-24 of
  // its exact value (~1 in size): a random walk of sqrt(476) x 2e-7 ~ 4e-6
  // per side. Measured 1.8e-6 on a dot of -16.2; 1e-4 is the slack of a
  // transpose identity whose failure (wrong sign or pairing) is O(1).
  EXPECT_NEAR(dot(d, y.data()), dot(x, rd.data()), 1e-4);
  // Backward undoes forward (a rotation): R^T R x = x.
  std::vector<float> back = y;
  rope_backward(back.data(), B, T, nh, hd, stride, table);
  // Two f32 rotations (cos^2 + sin^2 = 1 only to ~2 x 2^-24): ~4 x 2^-24
  // |x| ~ 1e-6 for |x| <= 4. Measured 2.4e-7 (1 ulp of 3.25).
  for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(back[i], x[i], 1e-5);
}

TEST(llama_kernels, rope_llama3_scaling_slows_only_long_wavelengths) {
  const int hd = 64;
  RopeScaling s{32.0, 1.0, 4.0, 8192};
  const RopeTable plain = rope_table(2, hd, 500000.0), scaled = rope_table(2, hd, 500000.0, s);
  // Position 1's angle is inv_freq itself: recover it from sin/cos.
  auto inv = [&](const RopeTable& t, int j) { return std::atan2(t.sin[t.half + j], t.cos[t.half + j]); };
  // Each recovered angle carries the f32 table's and atan2f's roundings,
  // ~2 x 2^-24 relative: 1 rad at j = 0 (both tables compute it alike:
  // measured equal; 1e-7 is ~2 ulp there), 9.4e-8 rad at j = 31 scaled
  // (4 x 2^-24 of it is 2.2e-14; measured equal).
  EXPECT_NEAR(inv(scaled, 0), inv(plain, 0), 1e-7);               // short wavelength: kept
  EXPECT_NEAR(inv(scaled, 31), inv(plain, 31) / 32.0, 1e-13);     // long wavelength: / factor
  EXPECT_THROW(rope_table(4, 7, 10000.0), std::exception);         // odd head size
}
