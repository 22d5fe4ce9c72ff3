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
        ASSERT_NEAR(y[i * H + j], g / (1.0 + std::exp(-g)) * u, 1e-5 * (1 + std::fabs(g * u)));
      }
    std::vector<float> dgu(N * 2 * H, 123.0f);  // overwritten
    swiglu_backward(dgu.data(), dy.data(), gu.data(), N, H);
    gu[0] = 0.3f;
    swiglu_backward(dgu.data(), dy.data(), gu.data(), N, H);
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
          ASSERT_NEAR(y[at + j], a * std::cos(ang) - c * std::sin(ang), 1e-5);
          ASSERT_NEAR(y[at + j + hd / 2], c * std::cos(ang) + a * std::sin(ang), 1e-5);
        }
  // Channels beyond the heads are untouched.
  for (int64_t r = 0; r < B * T; ++r)
    for (int64_t k = nh * hd; k < stride; ++k) ASSERT_EQ(y[r * stride + k], x[r * stride + k]);
  // <R x, d> == <x, R^T d>.
  std::vector<float> d = randn(B * T * stride, 7), rd = d;
  rope_backward(rd.data(), B, T, nh, hd, stride, table);
  EXPECT_NEAR(dot(d, y.data()), dot(x, rd.data()), 1e-4);
  // Backward undoes forward (a rotation): R^T R x = x.
  std::vector<float> back = y;
  rope_backward(back.data(), B, T, nh, hd, stride, table);
  for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(back[i], x[i], 1e-5);
}

TEST(llama_kernels, rope_llama3_scaling_slows_only_long_wavelengths) {
  const int hd = 64;
  RopeScaling s{32.0, 1.0, 4.0, 8192};
  const RopeTable plain = rope_table(2, hd, 500000.0), scaled = rope_table(2, hd, 500000.0, s);
  // Position 1's angle is inv_freq itself: recover it from sin/cos.
  auto inv = [&](const RopeTable& t, int j) { return std::atan2(t.sin[t.half + j], t.cos[t.half + j]); };
  EXPECT_NEAR(inv(scaled, 0), inv(plain, 0), 1e-7);               // short wavelength: kept
  EXPECT_NEAR(inv(scaled, 31), inv(plain, 31) / 32.0, 1e-9);      // long wavelength: / factor
  EXPECT_THROW(rope_table(4, 7, 10000.0), std::exception);         // odd head size
}
