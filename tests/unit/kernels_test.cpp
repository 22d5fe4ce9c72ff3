// test-links: mt_kernels
// Every CPU kernel's backward against finite differences of its forward, and
// attention's forward against a naive double-precision reference.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "gradcheck.h"
#include "meshtrain/kernels/cpu/adamw.h"
#include "meshtrain/kernels/cpu/attention.h"
#include "meshtrain/kernels/cpu/attention_fused.h"
#include "meshtrain/kernels/cpu/encoder.h"
#include "meshtrain/kernels/cpu/gelu.h"
#include "meshtrain/kernels/cpu/layernorm.h"
#include "meshtrain/kernels/cpu/matmul.h"
#include "meshtrain/kernels/cpu/reduce.h"
#include "meshtrain/kernels/cpu/softmax_cross_entropy.h"
#include "meshtrain/kernels/cpu/vec_math.h"

using namespace meshtrain;
using namespace meshtrain::cpu;
using meshtrain::testing::dot;
using meshtrain::testing::expect_gradient;
using meshtrain::testing::randn;

TEST(kernels, fast_exp_is_accurate) {
  // 3e-7 relative: expf_in_range is the degree-6 Taylor polynomial on
  // |r| <= ln2/2, truncation r^7/7! = 1.2e-7 of exp(r) (1.7e-7 at r = -ln2/2),
  // plus the Horner, scaling and f32 reference (std::exp(float)) roundings,
  // ~2 x 2^-24. Measured: 2.5e-7 (x = 7.28, 3 ulp), the same at every ISA level.
  for (float x = -20.f; x <= 20.f; x += 0.01f)
    ASSERT_NEAR(fast_expf(x), std::exp(x), 3e-7 * std::exp(x)) << x;
  EXPECT_EQ(fast_expf(-200.f) < 1e-37f, true);
}

TEST(kernels, matmul_backward_matches_finite_differences) {
  const int N = 5, C = 7, OC = 6;
  auto x = randn(N * C, 1), w = randn(OC * C, 2), b = randn(OC, 3), probe = randn(N * OC, 4);
  std::vector<float> out(N * OC);
  auto loss = [&] {
    matmul_forward(out.data(), x.data(), w.data(), b.data(), N, C, OC);
    return dot(probe, out.data());
  };
  std::vector<float> dx(N * C, 0.f), dw(OC * C, 0.f), db(OC, 0.f);
  matmul_backward(dx.data(), dw.data(), db.data(), probe.data(), x.data(), w.data(), N, C, OC);
  expect_gradient("dx", x, dx, loss);
  expect_gradient("dw", w, dw, loss);
  expect_gradient("db", b, db, loss);
  // accumulate=true adds to existing output
  std::vector<float> acc(N * OC, 1.0f), plain(N * OC);
  matmul_forward(acc.data(), x.data(), w.data(), b.data(), N, C, OC, true);
  matmul_forward(plain.data(), x.data(), w.data(), b.data(), N, C, OC);
  // The accumulating GEMM may add the existing 1 and the bias in another
  // order: reassociating C + 2 = 9 terms of size ~1 is within
  // 9 * 2^-24 * sum|terms| (~10) = 5e-6. Measured 4.8e-7 (1 ulp of 4.7).
  for (int i = 0; i < N * OC; ++i) EXPECT_NEAR(acc[i], plain[i] + 1.0f, 1e-5);
}

TEST(kernels, layernorm_backward_matches_finite_differences) {
  const int N = 6, C = 10;
  auto x = randn(N * C, 5), w = randn(C, 6), b = randn(C, 7), probe = randn(N * C, 8);
  std::vector<float> out(N * C), mean(N), rstd(N);
  auto loss = [&] {
    layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
    return dot(probe, out.data());
  };
  loss();
  for (int i = 0; i < N; ++i) {  // normalized rows have mean b-ish; check stats directly
    double m = 0;
    for (int c = 0; c < C; ++c) m += x[i * C + c];
    // f32 mean of C = 10 unit normals: (C - 1) 2^-24 sum|x| / C ~ 5e-7 worst
    // case (sum|x| ~ 8). Measured 5.4e-8; 1e-5 = 20x the worst case.
    EXPECT_NEAR(mean[i], m / C, 1e-5);
  }
  std::vector<float> dx(N * C, 0.f), dw(C, 0.f), db(C, 0.f);
  layernorm_backward(dx.data(), dw.data(), db.data(), probe.data(), x.data(), w.data(), mean.data(),
                     rstd.data(), N, C);
  // x reaches all C outputs of its row through the mean and rstd (sqrt(C)
  // more rounding noise, and a nonzero f''' where matmul's is 0): 2x the
  // default atol, 1.5x its rtol. Measured |a-n| <= 2.2e-5 (< 1% of it).
  expect_gradient("dx", x, dx, loss, 1e-2f, 3e-2, 2e-3);
  expect_gradient("dw", w, dw, loss);
  expect_gradient("db", b, db, loss);
}

TEST(kernels, gelu_matches_reference_and_finite_differences) {
  const int n = 50;
  auto x = randn(n, 9, 2.0f), probe = randn(n, 10);
  std::vector<float> out(n);
  gelu_forward(out.data(), x.data(), n);
  for (int i = 0; i < n; ++i) {
    double v = x[i];
    double ref = 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
    // GELU = x (1 - s): as x -> -inf, s -> 1 and 1 - s loses |x| 2^-24
    // absolutely (2.4e-7 at x = -4; the floor 1e-6 covers |x| up to 16);
    // relative 1e-6 = 17 x 2^-24 for the exp (<= 3 ulp), the division and
    // two products. Measured 1.9e-7 absolute at x ~ -4.1, 19% of the bound.
    EXPECT_NEAR(out[i], ref, 1e-6 + 1e-6 * std::fabs(ref));
  }
  auto loss = [&] {
    gelu_forward(out.data(), x.data(), n);
    return dot(probe, out.data());
  };
  std::vector<float> dx(n);
  gelu_backward(dx.data(), x.data(), probe.data(), n);
  expect_gradient("dx", x, dx, loss, 1e-2f, 2e-2, 1e-3, n);  // defaults (gradcheck.h), all n
  // And against the analytic derivative (in double) over a wide range.
  const auto wide = randn(4096, 11, 3.0f);
  std::vector<float> ones(wide.size(), 1.f), g(wide.size());
  gelu_backward(g.data(), wide.data(), ones.data(), static_cast<int64_t>(wide.size()));
  for (size_t i = 0; i < wide.size(); ++i) {
    const double v = wide[i], k = std::sqrt(2 / M_PI);
    const double t = std::tanh(k * (v + 0.044715 * v * v * v));
    const double ref = 0.5 * (1 + t) + 0.5 * v * (1 - t * t) * k * (1 + 3 * 0.044715 * v * v);
    // GELU' = (1 - s)(1 + x s 2u'): below x ~ -5, exp(2u) < 2^-24, so
    // exp(2u) + 1 rounds to 1, s = 1, and the kernel's 0 misses the true
    // ~2^-24 |1 + x s 2u'| (~33): 2e-6 absolute, under the 5e-6 floor. The
    // relative 5e-6 (80 x 2^-24) is slack over the exp, division and products
    // (a few ulp); where 1 + x s 2u' cancels (GELU' = 0 at x = -0.75) the
    // error is a few 2^-24 absolute. Measured 1.94e-6 (x = -4.96: 0 vs
    // -1.94e-6), 39% of the bound, at every ISA level.
    ASSERT_NEAR(g[i], ref, 5e-6 * (1 + std::fabs(ref))) << "x = " << v;
  }
}

TEST(kernels, encoder_backward_matches_finite_differences) {
  const int B = 2, T = 4, C = 3, V = 5;
  std::vector<int32_t> tok = {1, 3, 3, 0, 4, 1, 1, 2};
  auto wte = randn(V * C, 11), wpe = randn(T * C, 12), probe = randn(B * T * C, 13);
  std::vector<float> out(B * T * C);
  auto loss = [&] {
    encoder_forward(out.data(), tok.data(), wte.data(), wpe.data(), B, T, C);
    return dot(probe, out.data());
  };
  std::vector<float> dwte(V * C, 0.f), dwpe(T * C, 0.f);
  encoder_backward(dwte.data(), dwpe.data(), probe.data(), tok.data(), B, T, C);
  // The encoder is linear in wte and wpe (no truncation term), so rtol is
  // half the default; measured |a-n| <= 5.1e-6 (under 0.1% of the tolerance).
  expect_gradient("dwte", wte, dwte, loss, 1e-2f, 1e-2, 1e-3, V * C);
  expect_gradient("dwpe", wpe, dwpe, loss, 1e-2f, 1e-2, 1e-3, T * C);
}

TEST(kernels, softmax_cross_entropy_matches_reference_and_gradient) {
  const int N = 4, V = 7, Vp = 8;
  auto logits = randn(N * Vp, 14, 2.0f);
  std::vector<int32_t> tgt = {0, 6, -1, 3};  // -1 is ignored
  std::vector<float> losses(N);
  int64_t counted = softmax_cross_entropy_forward(losses.data(), logits.data(), tgt.data(), N, V, Vp);
  EXPECT_EQ(counted, 3);
  for (int i = 0; i < N; ++i) {
    if (tgt[i] < 0) {
      EXPECT_EQ(losses[i], 0.f);
      continue;
    }
    double mx = -1e30, s = 0;
    for (int j = 0; j < V; ++j) mx = std::max<double>(mx, logits[i * Vp + j]);
    for (int j = 0; j < V; ++j) s += std::exp(logits[i * Vp + j] - mx);
    // A loss of ~3-6 (V = 7 logits of sd 2): 1e-5 is ~20 ulp of it, for the
    // fast exp (<= 2.5e-7 relative), the 7-term f32 sum and the log, a few
    // ulp in all. Measured 2.5e-7 (1 ulp of 2.97).
    EXPECT_NEAR(losses[i], std::log(s) + mx - logits[i * Vp + tgt[i]], 1e-5);
  }
  auto loss = [&] {
    softmax_cross_entropy_forward(losses.data(), logits.data(), tgt.data(), N, V, Vp);
    double s = 0;
    for (float l : losses) s += l;
    return s;
  };
  std::vector<float> grad = logits;
  softmax_cross_entropy_backward(grad.data(), tgt.data(), 1.0f, N, V, Vp);
  for (int i = 0; i < N; ++i) EXPECT_EQ(grad[i * Vp + V], 0.f);  // padded column
  expect_gradient("dlogits", logits, grad, loss, 1e-2f, 2e-2, 1e-3, N * Vp);  // defaults, all N * Vp
}

namespace {
// Naive causal attention in double, for one (B,T,C,NH) problem.
std::vector<double> naive_attention(const std::vector<float>& qkv, int B, int T, int C, int NH) {
  const int hd = C / NH;
  std::vector<double> out(B * T * C, 0.0);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h)
      for (int i = 0; i < T; ++i) {
        std::vector<double> s(i + 1);
        double mx = -1e300;
        for (int j = 0; j <= i; ++j) {
          double d = 0;
          for (int k = 0; k < hd; ++k)
            d += double(qkv[(b * T + i) * 3 * C + h * hd + k]) * qkv[(b * T + j) * 3 * C + C + h * hd + k];
          s[j] = d / std::sqrt(double(hd));
          mx = std::max(mx, s[j]);
        }
        double z = 0;
        for (auto& v : s) z += (v = std::exp(v - mx));
        for (int j = 0; j <= i; ++j)
          for (int k = 0; k < hd; ++k)
            out[(b * T + i) * C + h * hd + k] += s[j] / z * qkv[(b * T + j) * 3 * C + 2 * C + h * hd + k];
      }
  return out;
}
}  // namespace

TEST(kernels, attention_forward_matches_naive_reference_across_row_blocks) {
  // T > the row block so the blocked causal path is exercised.
  const int B = 2, T = 150, C = 12, NH = 3;
  auto qkv = randn(B * T * 3 * C, 15);
  std::vector<float> out(B * T * C), lse(B * NH * T);
  std::vector<float> ws(2 * attention_workspace_floats(T, C / NH));
  attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH, ws.data(), 2);
  auto ref = naive_attention(qkv, B, T, C, NH);
  // Each output is a sum over up to T = 150 keys of p_j v_j (sum p_j = 1,
  // |v| <= ~3): the f32 worst case is T 2^-24 max|v| ~ 2.7e-5, which 2e-5
  // nearly reaches; the blocked sums' rounding is a random walk far below
  // it. Measured 3.6e-7 (avx2), 3.0e-7 (avx512), 3.3e-7 (scalar).
  for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], ref[i], 2e-5) << i;
}

TEST(kernels, attention_backward_matches_finite_differences) {
  const int B = 1, T = 70, C = 8, NH = 2;
  auto qkv = randn(B * T * 3 * C, 16), probe = randn(B * T * C, 17);
  std::vector<float> out(B * T * C), lse(B * NH * T);
  std::vector<float> ws(2 * attention_workspace_floats(T, C / NH));
  auto loss = [&] {
    attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH, ws.data(), 2);
    return dot(probe, out.data());
  };
  loss();
  std::vector<float> dqkv(B * T * 3 * C);
  attention_backward(dqkv.data(), probe.data(), qkv.data(), out.data(), lse.data(), B, T, C, NH,
                     ws.data(), 2);
  // One key or value element feeds up to T x hd = 280 outputs through the
  // softmax (rounding noise ~sqrt(280) 2^-24 / 0.02 ~ 5e-5, and a nonzero
  // f'''): atol 2x the default. Measured |a-n| <= 1.2e-4 (scalar), 4.6% of it.
  expect_gradient("dqkv", qkv, dqkv, loss, 1e-2f, 2e-2, 2e-3, 200);
}

TEST(kernels, fused_attention_matches_gemm_path_and_naive_reference) {
  // Head sizes with and without a whole vector (4, 24, 80) and lengths around
  // the 8-row score tile, the 32-column panel and the 64-row block.
  if (!attention_fused_available()) GTEST_SKIP() << "built without AVX-512";
  struct Shape { int B, T, C, NH; };
  for (Shape s : {Shape{1, 1, 8, 2}, Shape{2, 7, 12, 3}, Shape{1, 33, 48, 2}, Shape{2, 65, 128, 2},
                  Shape{1, 150, 160, 2}, Shape{1, 96, 64, 1}}) {
    SCOPED_TRACE(::testing::Message() << "B" << s.B << " T" << s.T << " C" << s.C << " NH" << s.NH);
    const int64_t n3 = int64_t(s.B) * s.T * 3 * s.C, n = int64_t(s.B) * s.T * s.C;
    auto qkv = randn(n3, 40 + s.T), dout = randn(n, 41 + s.T);
    std::vector<float> ws(2 * attention_workspace_floats(s.T, s.C / s.NH));
    std::vector<float> out_f(n), out_g(n), lse_f(s.B * s.NH * s.T), lse_g(s.B * s.NH * s.T);
    attention_forward_fused(out_f.data(), lse_f.data(), qkv.data(), s.B, s.T, s.C, s.NH, ws.data(), 2);
    attention_forward_gemm(out_g.data(), lse_g.data(), qkv.data(), s.B, s.T, s.C, s.NH, ws.data(), 2);
    auto ref = naive_attention(qkv, s.B, s.T, s.C, s.NH);
    // As in the test above: the f32 worst case over T <= 150 keys is
    // T 2^-24 max|v| ~ 2.7e-5 against the exact reference; the two f32 paths
    // differ by two such roundings in another order, bounded at 1e-5. lse
    // (max + log-sum over <= 150 scores, |lse| < 6) to 1e-5 = 20 ulp.
    // Measured: 6.2e-7 vs the reference, 4.8e-7 (1 ulp) between the paths,
    // 4.8e-7 on lse; under 5% of each bound at avx2, avx512 and avx512bf16.
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_NEAR(out_f[i], ref[i], 2e-5) << i;
      ASSERT_NEAR(out_f[i], out_g[i], 1e-5) << i;
    }
    for (size_t i = 0; i < lse_f.size(); ++i) ASSERT_NEAR(lse_f[i], lse_g[i], 1e-5) << i;
    // Backward into buffers pre-filled with garbage: every element must be written.
    std::vector<float> dq_f(n3, 7.f), dq_g(n3, -7.f);
    attention_backward_fused(dq_f.data(), dout.data(), qkv.data(), out_f.data(), lse_f.data(), s.B,
                             s.T, s.C, s.NH, ws.data(), 2);
    attention_backward_gemm(dq_g.data(), dout.data(), qkv.data(), out_g.data(), lse_g.data(), s.B,
                            s.T, s.C, s.NH, ws.data(), 2);
    // dQ, dK, dV sum over up to T = 150 rows or keys in each path's own
    // order: as for the forward, T 2^-24 times the terms' size (1 + |value|).
    // Measured 1.5e-6 (avx2), 6.8% of the bound.
    for (int64_t i = 0; i < n3; ++i)
      ASSERT_NEAR(dq_f[i], dq_g[i], 2e-5 * (1 + std::fabs(dq_g[i]))) << i;
  }
}

TEST(kernels, attention_propagates_nan_from_a_key_or_query) {
  // A NaN score must reach the output (and so the loss), not turn into a
  // finite value through the exp's clamp: on both paths. (A NaN in V may also
  // reach earlier rows of its tile or block, as 0 x NaN; only Q and K here.)
  const int B = 1, T = 40, C = 32, NH = 2, hd = C / NH;
  for (bool fused : {true, false}) {
    if (fused && !attention_fused_available()) continue;
    for (int which : {0, 1}) {  // 0: query row 5, 1: key row 5 (head 0, channel 0)
      auto qkv = randn(B * T * 3 * C, 28);
      qkv[5 * 3 * C + which * C] = std::numeric_limits<float>::quiet_NaN();
      std::vector<float> out(B * T * C), lse(B * NH * T);
      std::vector<float> ws(2 * attention_workspace_floats(T, hd));
      (fused ? attention_forward_fused : attention_forward_gemm)(out.data(), lse.data(), qkv.data(), B,
                                                                 T, C, NH, ws.data(), 2);
      SCOPED_TRACE(::testing::Message() << (fused ? "fused" : "gemm") << (which ? " key" : " query"));
      EXPECT_TRUE(std::isnan(out[5 * C])) << out[5 * C];  // row 5 sees key 5 / uses query 5
      EXPECT_TRUE(std::isnan(lse[5]));
      EXPECT_FALSE(std::isnan(out[4 * C]));  // row 4 sees neither
      EXPECT_FALSE(std::isnan(out[5 * C + hd]));  // head 1 is untouched
    }
  }
}

TEST(kernels, fused_attention_backward_matches_finite_differences_with_whole_vectors) {
  // hd = 16: the fused path's unmasked vectors (the test above covers hd 4 via the dispatcher).
  const int B = 1, T = 40, C = 32, NH = 2;
  auto qkv = randn(B * T * 3 * C, 26), probe = randn(B * T * C, 27);
  std::vector<float> out(B * T * C), lse(B * NH * T);
  std::vector<float> ws(2 * attention_workspace_floats(T, C / NH));
  auto loss = [&] {
    attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH, ws.data(), 2);
    return dot(probe, out.data());
  };
  loss();
  std::vector<float> dqkv(B * T * 3 * C);
  attention_backward(dqkv.data(), probe.data(), qkv.data(), out.data(), lse.data(), B, T, C, NH,
                     ws.data(), 2);
  // As attention_backward_matches_finite_differences (T x hd = 640 outputs
  // per key element). Measured |a-n| <= 1.9e-4 (scalar), 4.3% of the bound.
  expect_gradient("dqkv", qkv, dqkv, loss, 1e-2f, 2e-2, 2e-3, 200);
}

TEST(kernels, adamw_matches_formula) {
  float p = 0.5f, g = 0.2f, m = 0.f, v = 0.f;
  AdamWHyper h;
  h.lr = 0.1f;
  h.weight_decay = 0.1f;
  h.step = 1;
  adamw_step(&p, &g, &m, &v, 1, h);
  // First step: mhat = g, vhat = g^2 -> update = g/|g| = 1 (plus decay).
  // Each value is a few f32 roundings from the formula (the kernel's
  // 1 - 0.9f and 1 - 0.95f are 0.1f + 2.2e-8 and 0.05f + 1.1e-8): measured 0
  // on p, 3.7e-9 on m (2 ulp of 0.02), 4.7e-10 on v (2 ulp of 0.002). The
  // bounds are ~30 (p), 50 (m) and 400 (v) ulp; a wrong beta, decay or bias
  // correction is off by >= 1e-3.
  EXPECT_NEAR(p, 0.5f - 0.1f * (1.0f + 0.1f * 0.5f), 1e-6);
  EXPECT_NEAR(m, 0.1f * 0.2f, 1e-7);
  EXPECT_NEAR(v, 0.05f * 0.04f, 1e-7);
}

TEST(kernels, sum_squares_is_exact_enough_and_thread_independent) {
  auto x = randn(300001, 18);
  double ref = 0;
  for (float v : x) ref += double(v) * v;
  double s = sum_squares(x.data(), x.size());
  // f32 lanes within 2^16-element chunks, chunks added in double: each lane
  // sums m positive terms whose roundings random-walk to ~2^-24 sqrt(m/3)
  // relative (4e-6 for SSE's m = 2^14), averaging down over the 20 lanes x
  // chunks. Measured 5.0e-7 (scalar build, SSE lanes), 2.4e-7 (avx2),
  // 1.1e-7 (avx512): 1e-5 is 20x the largest.
  EXPECT_NEAR(s, ref, 1e-5 * ref);
  x[1234] = NAN;
  EXPECT_FALSE(all_finite(x.data(), x.size()));
}
