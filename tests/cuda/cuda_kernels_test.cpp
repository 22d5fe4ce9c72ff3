// Every entry of the CUDA kernel table against the CPU function of the same
// name (which defines the semantics) on the same inputs, at odd shapes. Each
// test skips, with the reason, where no GPU is visible.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "cuda_test_util.h"
#include "meshtrain/core/half.h"
#include "meshtrain/kernels/cpu/adamw.h"
#include "meshtrain/kernels/cpu/lamb.h"
#include "meshtrain/kernels/cpu/sgd.h"
#include "meshtrain/kernels/cpu/attention.h"
#include "meshtrain/kernels/cpu/convert.h"
#include "meshtrain/kernels/cpu/elementwise.h"
#include "meshtrain/kernels/cpu/encoder.h"
#include "meshtrain/kernels/cpu/gelu.h"
#include "meshtrain/kernels/cpu/gemm_general.h"
#include "meshtrain/kernels/cpu/kv_heads.h"
#include "meshtrain/kernels/cpu/layernorm.h"
#include "meshtrain/kernels/cpu/matmul.h"
#include "meshtrain/kernels/cpu/matmul_half.h"
#include "meshtrain/kernels/cpu/reduce.h"
#include "meshtrain/kernels/cpu/rmsnorm.h"
#include "meshtrain/kernels/cpu/rope.h"
#include "meshtrain/kernels/cpu/rows.h"
#include "meshtrain/kernels/cpu/softmax_cross_entropy.h"
#include "meshtrain/kernels/cpu/swiglu.h"
#include "meshtrain/kernels/cpu/vocab_shard_loss.h"
#include "meshtrain/kernels/cuda/cuda_kernel_table.h"

namespace meshtrain {
namespace {

using cuda_test::close;
using cuda_test::DeviceBuffer;
using cuda_test::ints;
using cuda_test::same_bits;
using cuda_test::uniform;
using cuda_test::within;
using FB = DeviceBuffer<float>;
using HB = DeviceBuffer<uint16_t>;
using IB = DeviceBuffer<int32_t>;

const KernelTable& gpu() { return cuda_kernel_table(); }
Stream stream() { return default_stream(Device::cuda(0)); }

constexpr double kU = 0x1p-24;  // f32 unit roundoff

std::vector<float> abs_of(std::vector<float> v) {
  for (auto& x : v) x = std::fabs(x);
  return v;
}

// The GEMM bound: both sides sum the same K exact products in different
// orders; each f32 sum's error is about sqrt(K) u sum|a||b| (random-walk
// rounding), so 16 sqrt(K) u (sum|a||b| + |terms added to it|) is a wide margin
// that still catches any wrong product (errors of order |a||b|).
std::vector<double> gemm_bound(const std::vector<float>& abs_sum, int64_t K,
                               const std::vector<float>& extra = {}) {
  std::vector<double> t(abs_sum.size());
  for (size_t i = 0; i < t.size(); ++i)
    t[i] = 16.0 * std::sqrt(static_cast<double>(K)) * kU *
               (abs_sum[i] + (extra.empty() ? 0.0 : std::fabs(extra[i]))) +
           1e-30;
  return t;
}

std::vector<uint16_t> halves(HalfFormat fmt, const std::vector<float>& v) {
  std::vector<uint16_t> h(v.size());
  cpu::to_half(fmt, v.data(), h.data(), static_cast<int64_t>(v.size()));
  return h;
}
std::vector<float> widen(HalfFormat fmt, const std::vector<uint16_t>& h) {
  std::vector<float> v(h.size());
  cpu::from_half(fmt, h.data(), v.data(), static_cast<int64_t>(h.size()));
  return v;
}

// ---- GEMMs ---------------------------------------------------------------

TEST(cuda_kernels, matmul_forward_f32) {
  MT_REQUIRE_GPU();
  const int64_t N = 33, C = 100, OC = 70;
  const auto inp = uniform(N * C, 1), w = uniform(OC * C, 2), bias = uniform(OC, 3);
  const auto prev = uniform(N * OC, 4);
  std::vector<float> abs_sum(N * OC);
  cpu::matmul_forward(abs_sum.data(), abs_of(inp).data(), abs_of(w).data(), abs_of(bias).data(), N,
                      C, OC);
  for (bool with_bias : {false, true})
    for (bool acc : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "bias " << with_bias << " accumulate " << acc);
      std::vector<float> want = prev;
      cpu::matmul_forward(want.data(), inp.data(), w.data(), with_bias ? bias.data() : nullptr, N, C,
                          OC, acc);
      FB d_out(prev), d_inp(inp), d_w(w), d_b(bias);
      gpu().matmul_forward(stream(), d_out.get(), d_inp.get(), d_w.get(),
                           with_bias ? d_b.get() : nullptr, N, C, OC, acc);
      EXPECT_TRUE(within(d_out.host(), want, gemm_bound(abs_sum, C, acc ? prev : std::vector<float>{})));
    }
}

TEST(cuda_kernels, matmul_backward_f32) {
  MT_REQUIRE_GPU();
  const int64_t N = 37, C = 100, OC = 91;
  const auto inp = uniform(N * C, 5), w = uniform(OC * C, 6), dout = uniform(N * OC, 7);
  const auto dinp0 = uniform(N * C, 8), dw0 = uniform(OC * C, 9), db0 = uniform(OC, 10);
  // The bounds: |dout| |W|, |dout|^T |inp| and column sums of |dout|.
  std::vector<float> a_dinp(N * C, 0.f), a_dw(OC * C, 0.f), a_db(OC, 0.f);
  cpu::matmul_backward(a_dinp.data(), a_dw.data(), a_db.data(), abs_of(dout).data(),
                       abs_of(inp).data(), abs_of(w).data(), N, C, OC);
  for (bool acc : {false, true}) {
    SCOPED_TRACE(::testing::Message() << "accumulate_dinp " << acc);
    std::vector<float> dinp = dinp0, dw = dw0, db = db0;
    cpu::matmul_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), N, C,
                         OC, acc);
    FB g_dinp(dinp0), g_dw(dw0), g_db(db0), g_dout(dout), g_inp(inp), g_w(w);
    gpu().matmul_backward(stream(), g_dinp.get(), g_dw.get(), g_db.get(), g_dout.get(), g_inp.get(),
                          g_w.get(), N, C, OC, acc);
    EXPECT_TRUE(within(g_dinp.host(), dinp, gemm_bound(a_dinp, OC, acc ? dinp0 : std::vector<float>{})));
    EXPECT_TRUE(within(g_dw.host(), dw, gemm_bound(a_dw, N, dw0)));
    EXPECT_TRUE(within(g_db.host(), db, gemm_bound(a_db, N, db0)));
  }
}

class cuda_kernels_half : public ::testing::TestWithParam<HalfFormat> {};

// Both sides multiply the same 16-bit operands (products exact in f32) and
// accumulate in f32; tensor cores may round their internal sums less
// carefully than IEEE, so the bound is linear in K: 4 K u sum|a||b|.
std::vector<double> half_bound(const std::vector<float>& abs_sum, int64_t K,
                               const std::vector<float>& extra = {}) {
  std::vector<double> t(abs_sum.size());
  for (size_t i = 0; i < t.size(); ++i)
    t[i] = 4.0 * K * kU * (abs_sum[i] + (extra.empty() ? 0.0 : std::fabs(extra[i]))) + 1e-30;
  return t;
}

TEST_P(cuda_kernels_half, matmul_forward_half) {
  MT_REQUIRE_GPU();
  const HalfFormat fmt = GetParam();
  const int64_t N = 33, C = 100, OC = 70;
  const auto inp_h = halves(fmt, uniform(N * C, 11)), w_h = halves(fmt, uniform(OC * C, 12));
  const auto bias = uniform(OC, 13), prev = uniform(N * OC, 14);
  std::vector<float> abs_sum(N * OC);
  cpu::matmul_forward(abs_sum.data(), abs_of(widen(fmt, inp_h)).data(), abs_of(widen(fmt, w_h)).data(),
                      abs_of(bias).data(), N, C, OC);
  for (bool with_bias : {false, true})
    for (bool acc : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "bias " << with_bias << " accumulate " << acc);
      std::vector<float> want = prev;
      cpu::matmul_forward_half(fmt, want.data(), inp_h.data(), w_h.data(),
                               with_bias ? bias.data() : nullptr, N, C, OC, acc);
      FB d_out(prev), d_b(bias);
      HB d_inp(inp_h), d_w(w_h);
      gpu().matmul_forward_half(stream(), fmt, d_out.get(), d_inp.get(), d_w.get(),
                                with_bias ? d_b.get() : nullptr, N, C, OC, acc);
      EXPECT_TRUE(within(d_out.host(), want, half_bound(abs_sum, C, acc ? prev : std::vector<float>{})));
    }
}

TEST_P(cuda_kernels_half, matmul_backward_half) {
  MT_REQUIRE_GPU();
  const HalfFormat fmt = GetParam();
  const int64_t N = 37, C = 100, OC = 91;
  const auto inp_h = halves(fmt, uniform(N * C, 15)), w_h = halves(fmt, uniform(OC * C, 16));
  const auto dout = uniform(N * OC, 17);
  const auto dinp0 = uniform(N * C, 18), dw0 = uniform(OC * C, 19), db0 = uniform(OC, 20);
  std::vector<float> a_dinp(N * C, 0.f), a_dw(OC * C, 0.f), a_db(OC, 0.f);
  cpu::matmul_backward(a_dinp.data(), a_dw.data(), a_db.data(), abs_of(dout).data(),
                       abs_of(widen(fmt, inp_h)).data(), abs_of(widen(fmt, w_h)).data(), N, C, OC);
  for (bool acc : {false, true}) {
    SCOPED_TRACE(::testing::Message() << "accumulate_dinp " << acc);
    std::vector<float> dinp = dinp0, dw = dw0, db = db0;
    std::vector<uint16_t> dout_h(N * OC);
    cpu::matmul_backward_half(fmt, dinp.data(), dw.data(), db.data(), dout.data(), dout_h.data(),
                              inp_h.data(), w_h.data(), N, C, OC, acc);
    FB g_dinp(dinp0), g_dw(dw0), g_db(db0), g_dout(dout);
    HB g_dout_h(N * OC), g_inp(inp_h), g_w(w_h);
    gpu().matmul_backward_half(stream(), fmt, g_dinp.get(), g_dw.get(), g_db.get(), g_dout.get(),
                               g_dout_h.get(), g_inp.get(), g_w.get(), N, C, OC, acc);
    EXPECT_TRUE(same_bits(g_dout_h.host(), dout_h));  // the rounding is exact on both
    // dout rounded to 16 bits: |dout_half| <= |dout| (1 + 2^-8), inside the bound's margin.
    EXPECT_TRUE(within(g_dinp.host(), dinp, half_bound(a_dinp, OC, acc ? dinp0 : std::vector<float>{})));
    EXPECT_TRUE(within(g_dw.host(), dw, half_bound(a_dw, N, dw0)));
    EXPECT_TRUE(within(g_db.host(), db, gemm_bound(a_db, N, db0)));  // f32 column sums
  }
}

TEST_P(cuda_kernels_half, matmul_backward_weight_half) {
  MT_REQUIRE_GPU();
  const HalfFormat fmt = GetParam();
  const int64_t N = 45, C = 36, OC = 70;
  const auto inp_h = halves(fmt, uniform(N * C, 21)), dout_h = halves(fmt, uniform(N * OC, 22));
  const auto dw0 = uniform(OC * C, 23);
  std::vector<float> a_dw(OC * C, 0.f);
  cpu::matmul_backward(nullptr, a_dw.data(), nullptr, abs_of(widen(fmt, dout_h)).data(),
                       abs_of(widen(fmt, inp_h)).data(), nullptr, N, C, OC);
  std::vector<float> dw = dw0;
  cpu::matmul_backward_weight_half(fmt, dw.data(), dout_h.data(), inp_h.data(), N, C, OC);
  FB g_dw(dw0);
  HB g_dout(dout_h), g_inp(inp_h);
  gpu().matmul_backward_weight_half(stream(), fmt, g_dw.get(), g_dout.get(), g_inp.get(), N, C, OC);
  EXPECT_TRUE(within(g_dw.host(), dw, half_bound(a_dw, N, dw0)));
}

TEST(cuda_kernels, sgemm_row_major_strided) {
  MT_REQUIRE_GPU();
  const int64_t M = 33, N = 37, K = 20;
  const float alpha = 0.75f, beta = -0.5f;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "trans_a " << ta << " trans_b " << tb);
      // Leading dimensions wider than the rows (strided views).
      const int64_t lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 5, ldc = N + 7;
      const auto A = uniform((ta ? K : M) * lda, 24), B = uniform((tb ? N : K) * ldb, 25);
      const auto C0 = uniform(M * ldc, 26);
      std::vector<float> want = C0, abs_sum(M * ldc, 0.f);
      cpu::sgemm(ta, tb, M, N, K, alpha, A.data(), lda, B.data(), ldb, beta, want.data(), ldc);
      cpu::sgemm(ta, tb, M, N, K, std::fabs(alpha), abs_of(A).data(), lda, abs_of(B).data(), ldb,
                 0.f, abs_sum.data(), ldc);
      std::vector<float> extra = C0;
      for (auto& x : extra) x *= beta;
      FB gA(A), gB(B), gC(C0);
      gpu().sgemm(stream(), ta, tb, M, N, K, alpha, gA.get(), lda, gB.get(), ldb, beta, gC.get(), ldc);
      EXPECT_TRUE(within(gC.host(), want, gemm_bound(abs_sum, K, extra)));
    }
}

// The distributed multiply's local work (linalg/): f64, 16-bit operands at any
// leading dimension, strided batches, pitched copies.
TEST(cuda_kernels, dgemm_row_major_strided) {
  MT_REQUIRE_GPU();
  const int64_t M = 33, N = 37, K = 20;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "trans_a " << ta << " trans_b " << tb);
      const int64_t lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 5, ldc = N + 7;
      const auto Af = uniform((ta ? K : M) * lda, 31), Bf = uniform((tb ? N : K) * ldb, 32);
      const auto Cf = uniform(M * ldc, 33);
      std::vector<double> A(Af.begin(), Af.end()), B(Bf.begin(), Bf.end()), C0(Cf.begin(), Cf.end());
      std::vector<double> want = C0;
      cpu::dgemm(ta, tb, M, N, K, 0.75, A.data(), lda, B.data(), ldb, -0.5, want.data(), ldc);
      DeviceBuffer<double> gA(A), gB(B), gC(C0);
      gpu().dgemm(stream(), ta, tb, M, N, K, 0.75, gA.get(), lda, gB.get(), ldb, -0.5, gC.get(), ldc);
      const std::vector<double> got = gC.host();
      double worst = 0;
      for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::fabs(got[i] - want[i]));
      EXPECT_LT(worst, 16.0 * std::sqrt(double(K)) * 0x1p-53 * (K + 1)) << "f64 sums of K terms below 1";
    }
}

class cuda_kernels_gemm_half : public ::testing::TestWithParam<HalfFormat> {};
INSTANTIATE_TEST_SUITE_P(formats, cuda_kernels_gemm_half, ::testing::Values(HalfFormat::BF16, HalfFormat::F16));

TEST_P(cuda_kernels_gemm_half, gemm_half_row_major_strided) {
  MT_REQUIRE_GPU();
  const HalfFormat fmt = GetParam();
  const int64_t M = 29, N = 35, K = 48;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "trans_a " << ta << " trans_b " << tb);
      const int64_t lda = (ta ? M : K) + 2, ldb = (tb ? K : N) + 4, ldc = N + 1;
      const auto A = halves(fmt, uniform((ta ? K : M) * lda, 34)), B = halves(fmt, uniform((tb ? N : K) * ldb, 35));
      const auto C0 = uniform(M * ldc, 36);
      std::vector<float> want = C0, abs_sum(M * ldc, 0.f);
      cpu::gemm_half_general(fmt, ta, tb, M, N, K, 1.25f, A.data(), lda, B.data(), ldb, 0.5f, want.data(), ldc);
      cpu::sgemm(ta, tb, M, N, K, 1.25f, abs_of(widen(fmt, A)).data(), lda, abs_of(widen(fmt, B)).data(), ldb,
                 0.f, abs_sum.data(), ldc);
      std::vector<float> extra = C0;
      for (auto& x : extra) x *= 0.5f;
      HB gA(A), gB(B);
      FB gC(C0);
      gpu().gemm_half(stream(), fmt, ta, tb, M, N, K, 1.25f, gA.get(), lda, gB.get(), ldb, 0.5f, gC.get(), ldc);
      EXPECT_TRUE(within(gC.host(), want, gemm_bound(abs_sum, K, extra)));
    }
}

TEST(cuda_kernels, sgemm_strided_batched) {
  MT_REQUIRE_GPU();
  const int64_t M = 9, N = 11, K = 13, batch = 7, sa = M * K + 3, sb = K * N + 2, sc = M * N + 5;
  const auto A = uniform(batch * sa, 37), B = uniform(batch * sb, 38), C0 = uniform(batch * sc, 39);
  std::vector<float> want = C0, abs_sum(C0.size(), 0.f);
  cpu::sgemm_strided_batched(false, true, M, N, K, 1.f, A.data(), K, sa, B.data(), K, sb, 0.25f, want.data(), N,
                             sc, batch);
  const auto aA = abs_of(A), aB = abs_of(B);
  cpu::sgemm_strided_batched(false, true, M, N, K, 1.f, aA.data(), K, sa, aB.data(), K, sb, 0.f, abs_sum.data(), N,
                             sc, batch);
  std::vector<float> extra = C0;
  for (auto& x : extra) x *= 0.25f;
  FB gA(A), gB(B), gC(C0);
  gpu().sgemm_strided_batched(stream(), false, true, M, N, K, 1.f, gA.get(), K, sa, gB.get(), K, sb, 0.25f,
                              gC.get(), N, sc, batch);
  EXPECT_TRUE(within(gC.host(), want, gemm_bound(abs_sum, K, extra)));
}

TEST(cuda_kernels, copy_2d_pitched) {
  MT_REQUIRE_GPU();
  const auto src = uniform(10 * 16, 40);
  FB g_src(src), g_dst(10 * 7);
  gpu().copy_2d(stream(), g_dst.get(), 7 * sizeof(float), g_src.get() + 3, 16 * sizeof(float), 5 * sizeof(float), 10);
  const auto got = g_dst.host();
  for (int r = 0; r < 10; ++r)
    for (int c = 0; c < 7; ++c) EXPECT_EQ(got[r * 7 + c], c < 5 ? src[r * 16 + 3 + c] : 0.f);
}

// ---- Normalization and activations --------------------------------------

// Row statistics are sums of C terms in another order: relative errors of a
// few C u (C = 100: ~1e-5) on outputs of magnitude up to ~4.
TEST(cuda_kernels, layernorm_forward_backward) {
  MT_REQUIRE_GPU();
  const int64_t N = 74, C = 100;
  const auto x = uniform(N * C, 30, -2.f, 3.f), w = uniform(C, 31), b = uniform(C, 32);
  std::vector<float> out(N * C), mean(N), rstd(N);
  cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
  FB g_out(N * C), g_mean(N), g_rstd(N), g_x(x), g_w(w), g_b(b);
  gpu().layernorm_forward(stream(), g_out.get(), g_mean.get(), g_rstd.get(), g_x.get(), g_w.get(),
                          g_b.get(), N, C);
  EXPECT_TRUE(close(g_out.host(), out, 2e-5, 2e-5));
  EXPECT_TRUE(close(g_mean.host(), mean, 1e-6, 1e-5));
  EXPECT_TRUE(close(g_rstd.host(), rstd, 0, 2e-5));

  const auto dout = uniform(N * C, 33);
  auto dinp = uniform(N * C, 34), dw = uniform(C, 35), db = uniform(C, 36);
  FB g_dinp(dinp), g_dw(dw), g_db(db), g_dout(dout);
  cpu::layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(),
                          mean.data(), rstd.data(), N, C);
  // The GPU gets the CPU's mean and rstd, so only the sums differ in order:
  // per row C terms (dinp), per column N = 74 terms (dweight, dbias), values ~1.
  g_mean.upload(mean);
  g_rstd.upload(rstd);
  gpu().layernorm_backward(stream(), g_dinp.get(), g_dw.get(), g_db.get(), g_dout.get(), g_x.get(),
                           g_w.get(), g_mean.get(), g_rstd.get(), N, C);
  EXPECT_TRUE(close(g_dinp.host(), dinp, 2e-5, 2e-5));
  EXPECT_TRUE(close(g_dw.host(), dw, 5e-5, 2e-5));
  EXPECT_TRUE(close(g_db.host(), db, 5e-5, 2e-5));
}

TEST(cuda_kernels, rmsnorm_forward_backward) {
  MT_REQUIRE_GPU();
  const int64_t N = 74, C = 100;
  const float eps = 1e-6f;
  const auto x = uniform(N * C, 40, -2.f, 2.f), w = uniform(C, 41);
  std::vector<float> out(N * C), rstd(N);
  cpu::rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, eps);
  FB g_out(N * C), g_rstd(N), g_x(x), g_w(w);
  gpu().rmsnorm_forward(stream(), g_out.get(), g_rstd.get(), g_x.get(), g_w.get(), N, C, eps);
  // Sum of C squares in another order: relative ~C u on rstd and outputs.
  EXPECT_TRUE(close(g_out.host(), out, 1e-5, 2e-5));
  EXPECT_TRUE(close(g_rstd.host(), rstd, 0, 2e-5));

  const auto dout = uniform(N * C, 42);
  auto dinp = uniform(N * C, 43), dw = uniform(C, 44);
  FB g_dinp(dinp), g_dw(dw), g_dout(dout);
  cpu::rmsnorm_backward(dinp.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C);
  g_rstd.upload(rstd);
  gpu().rmsnorm_backward(stream(), g_dinp.get(), g_dw.get(), g_dout.get(), g_x.get(), g_w.get(),
                         g_rstd.get(), N, C);
  // Row sums of C terms and column sums of N terms in other orders, values ~1.
  EXPECT_TRUE(close(g_dinp.host(), dinp, 2e-5, 2e-5));
  EXPECT_TRUE(close(g_dw.host(), dw, 5e-5, 2e-5));
}

TEST(cuda_kernels, gelu_forward_backward) {
  MT_REQUIRE_GPU();
  auto x = uniform(1000, 50, -6.f, 6.f);
  const float inf = std::numeric_limits<float>::infinity();
  for (float v : {0.f, -0.f, 30.f, -30.f, 1e4f, -1e4f, inf, -inf, std::nanf("")}) x.push_back(v);
  const int64_t n = static_cast<int64_t>(x.size());
  const auto dout = uniform(n, 51);
  std::vector<float> out(n), dinp(n);
  cpu::gelu_forward(out.data(), x.data(), n);
  cpu::gelu_backward(dinp.data(), x.data(), dout.data(), n);
  FB g_out(n), g_dinp(n), g_x(x), g_dout(dout);
  gpu().gelu_forward(stream(), g_out.get(), g_x.get(), n);
  gpu().gelu_backward(stream(), g_dinp.get(), g_x.get(), g_dout.get(), n);
  // The same formula; expf against the CPU's vectorized exp (a few ulp):
  // relative 1e-5, absolute 1e-6 where GELU is near 0.
  EXPECT_TRUE(close(g_out.host(), out, 1e-6, 1e-5));
  EXPECT_TRUE(close(g_dinp.host(), dinp, 1e-6, 1e-5));
}

TEST(cuda_kernels, swiglu_forward_backward) {
  MT_REQUIRE_GPU();
  const int64_t N = 33, H = 70;
  const auto gu = uniform(N * 2 * H, 52, -5.f, 5.f), dout = uniform(N * H, 53);
  std::vector<float> out(N * H), dgu(N * 2 * H);
  cpu::swiglu_forward(out.data(), gu.data(), N, H);
  cpu::swiglu_backward(dgu.data(), dout.data(), gu.data(), N, H);
  FB g_out(N * H), g_dgu(N * 2 * H), g_gu(gu), g_dout(dout);
  gpu().swiglu_forward(stream(), g_out.get(), g_gu.get(), N, H);
  gpu().swiglu_backward(stream(), g_dgu.get(), g_dout.get(), g_gu.get(), N, H);
  // expf against the CPU's fast_expf (a few ulp), then a handful of roundings.
  EXPECT_TRUE(close(g_out.host(), out, 1e-6, 1e-5));
  EXPECT_TRUE(close(g_dgu.host(), dgu, 1e-6, 1e-5));
}

// ---- Attention -----------------------------------------------------------

struct AttnShape {
  int64_t B, T, C, NH;
};

class cuda_kernels_attention : public ::testing::TestWithParam<AttnShape> {};

TEST_P(cuda_kernels_attention, forward_backward) {
  MT_REQUIRE_GPU();
  const auto [B, T, C, NH] = GetParam();
  const int64_t hd = C / NH;
  const auto qkv = uniform(B * T * 3 * C, 60), dout = uniform(B * T * C, 61);
  std::vector<float> ws(cpu::attention_workspace_floats(T, hd));
  std::vector<float> out(B * T * C), lse(B * NH * T), dqkv(B * T * 3 * C);
  cpu::attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH, ws.data(), 1);
  cpu::attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T, C, NH,
                          ws.data(), 1);
  FB g_out(B * T * C), g_lse(B * NH * T), g_qkv(qkv), g_dout(dout), g_dqkv(B * T * 3 * C);
  gpu().attention_forward(stream(), g_out.get(), g_lse.get(), g_qkv.get(), B, T, C, NH, nullptr, 1);
  // Scores are hd-term dot products (|s| <= sqrt(hd)) in another order and
  // exp differs by a few ulp: absolute errors ~1e-6 on lse, on out (a
  // convex combination of values in [-1, 1]) and on the gradients (sums of
  // T such terms); 3e-5 plus 1e-4 relative leaves a wide margin.
  EXPECT_TRUE(close(g_out.host(), out, 3e-5, 1e-4));
  EXPECT_TRUE(close(g_lse.host(), lse, 3e-5, 1e-5));
  // The backward from the CPU's out and lse, so it is compared alone.
  g_out.upload(out);
  g_lse.upload(lse);
  gpu().attention_backward(stream(), g_dqkv.get(), g_dout.get(), g_qkv.get(), g_out.get(),
                           g_lse.get(), B, T, C, NH, nullptr, 1);
  const auto first = g_dqkv.host();
  EXPECT_TRUE(close(first, dqkv, 1e-4, 1e-4));
  // Deterministic: a second run gives the same bits.
  FB g_dqkv2(B * T * 3 * C);
  gpu().attention_backward(stream(), g_dqkv2.get(), g_dout.get(), g_qkv.get(), g_out.get(),
                           g_lse.get(), B, T, C, NH, nullptr, 1);
  EXPECT_TRUE(same_bits(g_dqkv2.host(), first));
}

INSTANTIATE_TEST_SUITE_P(shapes, cuda_kernels_attention,
                         ::testing::Values(AttnShape{2, 37, 100, 5},   // hd 20
                                           AttnShape{1, 70, 128, 2},   // hd 64
                                           AttnShape{2, 45, 256, 2},   // hd 128: > 48 KiB shared
                                           AttnShape{1, 1, 12, 3},     // one position, hd 4
                                           AttnShape{3, 33, 63, 7}));  // odd hd 9

// Mixed precision's attention: the products on the tensor cores with 16-bit
// operands (head sizes 64 and 128), the rest in f32. Against the CPU's f32
// attention by relative norm error, each part of the output on its own:
// rounding the operands to bf16 (8 bits) gives errors of about 2^-9 = 2e-3
// (1.4e-3 to 2.2e-3 in the CPU emulation of these kernels,
// tests/unit/attention_tc_emulation_test.cpp), fp16 (11 bits) about 2.6e-4.
struct AttnHalfCase {
  AttnShape shape;
  HalfFormat fmt;
};

class cuda_kernels_attention_half : public ::testing::TestWithParam<AttnHalfCase> {};

// ||got - want|| over columns [begin, begin + count) of each row, relative to
// ||want|| over columns [norm_begin, norm_begin + norm_count).
::testing::AssertionResult rel_close(const std::vector<float>& got, const std::vector<float>& want,
                                     size_t begin, size_t count, size_t stride, size_t norm_begin,
                                     size_t norm_count, double tol, const char* what) {
  double num = 0, den = 0;
  for (size_t r = 0; r < want.size() / stride; ++r) {
    for (size_t i = begin; i < begin + count; ++i) {
      const double d = static_cast<double>(got[r * stride + i]) - want[r * stride + i];
      num += d * d;
    }
    for (size_t i = norm_begin; i < norm_begin + norm_count; ++i)
      den += static_cast<double>(want[r * stride + i]) * want[r * stride + i];
  }
  const double rel = std::sqrt(num / (den + 1e-30));
  if (rel <= tol) return ::testing::AssertionSuccess();  // NaN fails here
  return ::testing::AssertionFailure() << what << ": relative error " << rel << " > " << tol;
}

TEST_P(cuda_kernels_attention_half, forward_backward) {
  MT_REQUIRE_GPU();
  const auto [shape, fmt] = GetParam();
  const auto [B, T, C, NH] = shape;
  const int64_t hd = C / NH;
  const double tol = fmt == HalfFormat::BF16 ? 6e-3 : 1e-3;
  const auto qkv = uniform(B * T * 3 * C, 70), dout = uniform(B * T * C, 71);
  std::vector<float> ws(cpu::attention_workspace_floats(T, hd));
  std::vector<float> out(B * T * C), lse(B * NH * T), dqkv(B * T * 3 * C);
  cpu::attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH, ws.data(), 1);
  cpu::attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T, C, NH,
                          ws.data(), 1);
  // Every output element must be written: they start as NaN.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  FB g_out(std::vector<float>(B * T * C, nan)), g_lse(std::vector<float>(B * NH * T, nan));
  FB g_qkv(qkv), g_dout(dout), g_dqkv(std::vector<float>(B * T * 3 * C, nan));
  gpu().attention_forward_half(stream(), fmt, g_out.get(), g_lse.get(), g_qkv.get(), B, T, C, NH,
                               nullptr, 1);
  EXPECT_TRUE(rel_close(g_out.host(), out, 0, C, C, 0, C, tol, "out"));
  // lse is about log T; its error is the scores' (absolute, a few 2^-9 |s|).
  EXPECT_TRUE(close(g_lse.host(), lse, 4 * tol, 0));
  g_out.upload(out);
  g_lse.upload(lse);
  gpu().attention_backward_half(stream(), fmt, g_dqkv.get(), g_dout.get(), g_qkv.get(),
                                g_out.get(), g_lse.get(), B, T, C, NH, nullptr, 1);
  const auto first = g_dqkv.host();
  // dq and dk relative to the whole gradient: they vanish where a row sees
  // one key (T = 1), and dS = P (dP - D) then holds only the rounding.
  EXPECT_TRUE(rel_close(first, dqkv, 0, C, 3 * C, 0, 3 * C, tol, "dq"));
  EXPECT_TRUE(rel_close(first, dqkv, C, C, 3 * C, 0, 3 * C, tol, "dk"));
  EXPECT_TRUE(rel_close(first, dqkv, 2 * C, C, 3 * C, 2 * C, C, tol, "dv"));
  FB g_dqkv2(B * T * 3 * C);
  gpu().attention_backward_half(stream(), fmt, g_dqkv2.get(), g_dout.get(), g_qkv.get(),
                                g_out.get(), g_lse.get(), B, T, C, NH, nullptr, 1);
  EXPECT_TRUE(same_bits(g_dqkv2.host(), first));
}

INSTANTIATE_TEST_SUITE_P(
    shapes, cuda_kernels_attention_half,
    ::testing::Values(AttnHalfCase{{2, 100, 128, 2}, HalfFormat::BF16},  // hd 64, a partial tile
                      AttnHalfCase{{2, 100, 128, 2}, HalfFormat::F16},
                      AttnHalfCase{{1, 130, 256, 2}, HalfFormat::BF16},  // hd 128
                      AttnHalfCase{{1, 130, 256, 2}, HalfFormat::F16},
                      AttnHalfCase{{3, 64, 384, 6}, HalfFormat::BF16},   // whole tiles
                      AttnHalfCase{{1, 1, 64, 1}, HalfFormat::BF16},     // one position
                      AttnHalfCase{{2, 257, 768, 12}, HalfFormat::BF16}));  // GPT-2's heads

// Head sizes the tensor-core tiles do not take run the f32 kernels: the same bits.
TEST(cuda_kernels, attention_half_other_head_sizes_are_f32) {
  MT_REQUIRE_GPU();
  const int64_t B = 2, T = 37, C = 100, NH = 5;  // hd 20
  const auto qkv = uniform(B * T * 3 * C, 72), dout = uniform(B * T * C, 73);
  FB g_qkv(qkv), g_dout(dout), o1(B * T * C), l1(B * NH * T), o2(B * T * C), l2(B * NH * T);
  FB d1(B * T * 3 * C), d2(B * T * 3 * C);
  gpu().attention_forward(stream(), o1.get(), l1.get(), g_qkv.get(), B, T, C, NH, nullptr, 1);
  gpu().attention_forward_half(stream(), HalfFormat::BF16, o2.get(), l2.get(), g_qkv.get(), B, T, C,
                               NH, nullptr, 1);
  EXPECT_TRUE(same_bits(o2.host(), o1.host()));
  EXPECT_TRUE(same_bits(l2.host(), l1.host()));
  gpu().attention_backward(stream(), d1.get(), g_dout.get(), g_qkv.get(), o1.get(), l1.get(), B, T,
                           C, NH, nullptr, 1);
  gpu().attention_backward_half(stream(), HalfFormat::BF16, d2.get(), g_dout.get(), g_qkv.get(),
                                o1.get(), l1.get(), B, T, C, NH, nullptr, 1);
  EXPECT_TRUE(same_bits(d2.host(), d1.host()));
}

TEST(cuda_kernels, rope_forward_backward) {
  MT_REQUIRE_GPU();
  const int64_t B = 2, T = 37, NH = 5, hd = 20, C = NH * hd, stride = 3 * C;
  const auto table = cpu::rope_table(41, hd, 10000.0);
  FB g_cos(table.cos), g_sin(table.sin);
  const RopeView view{g_cos.get(), g_sin.get(), table.T, table.half};
  const auto x = uniform(B * T * stride, 70, -3.f, 3.f);
  std::vector<float> fwd = x, bwd = x;
  cpu::rope_forward(fwd.data(), B, T, NH, hd, stride, table);
  cpu::rope_backward(bwd.data(), B, T, NH, hd, stride, table);
  FB g_fwd(x), g_bwd(x);
  gpu().rope_forward(stream(), g_fwd.get(), B, T, NH, hd, stride, view);
  gpu().rope_backward(stream(), g_bwd.get(), B, T, NH, hd, stride, view);
  // Two products and a sum, each rounded once on both sides (no FMA on the
  // GPU either): within an ulp of |a| + |b| <= 6.
  EXPECT_TRUE(close(g_fwd.host(), fwd, 6 * 2 * kU * 2, 0));
  EXPECT_TRUE(close(g_bwd.host(), bwd, 6 * 2 * kU * 2, 0));
}

// ---- Embeddings, rows and the loss ---------------------------------------

TEST(cuda_kernels, encoder_forward_backward) {
  MT_REQUIRE_GPU();
  const int64_t B = 2, T = 37, C = 100, V = 7;  // few ids: many tokens share a row
  const auto ids = ints(B * T, 80, 0, V - 1);
  const auto wte = uniform(V * C, 81), wpe = uniform(T * C, 82), dout = uniform(B * T * C, 83);
  std::vector<float> out(B * T * C);
  cpu::encoder_forward(out.data(), ids.data(), wte.data(), wpe.data(), B, T, C);
  FB g_out(B * T * C), g_wte(wte), g_wpe(wpe), g_dout(dout);
  IB g_ids(ids);
  gpu().encoder_forward(stream(), g_out.get(), g_ids.get(), g_wte.get(), g_wpe.get(), B, T, C);
  EXPECT_TRUE(same_bits(g_out.host(), out));  // one addition each: exact

  auto dwte = uniform(V * C, 84), dwpe = uniform(T * C, 85);
  FB g_dwte(dwte), g_dwpe(dwpe), g_dwte2(dwte), g_dwpe2(dwpe);
  cpu::encoder_backward(dwte.data(), dwpe.data(), dout.data(), ids.data(), B, T, C);
  gpu().encoder_backward(stream(), g_dwte.get(), g_dwpe.get(), g_dout.get(), g_ids.get(), B, T, C);
  gpu().encoder_backward(stream(), g_dwte2.get(), g_dwpe2.get(), g_dout.get(), g_ids.get(), B, T, C);
  // The CPU's order (tokens ascending onto each row): the same bits, and the
  // same again on a second run.
  const auto h_dwte = g_dwte.host(), h_dwpe = g_dwpe.host();
  EXPECT_TRUE(same_bits(h_dwte, dwte));
  EXPECT_TRUE(same_bits(h_dwpe, dwpe));
  EXPECT_TRUE(same_bits(g_dwte2.host(), h_dwte));
  EXPECT_TRUE(same_bits(g_dwpe2.host(), h_dwpe));
}

TEST(cuda_kernels, embedding_lookup_all_formats) {
  MT_REQUIRE_GPU();
  const int64_t N = 33, C = 100, V = 91, v_begin = 10, v_rows = 40;
  const auto ids = ints(N, 90, 0, V - 1);  // some outside [10, 50): zero rows
  const auto table = uniform(v_rows * C, 91);
  FB g_table(table), g_out(N * C);
  IB g_ids(ids);
  std::vector<float> want(N * C);
  cpu::embedding_lookup(want.data(), ids.data(), table.data(), nullptr, HalfFormat::BF16, v_begin,
                        v_rows, N, C);
  gpu().embedding_lookup(stream(), g_out.get(), g_ids.get(), g_table.get(), nullptr,
                         HalfFormat::BF16, v_begin, v_rows, N, C);
  EXPECT_TRUE(same_bits(g_out.host(), want));  // copies: exact
  for (HalfFormat fmt : {HalfFormat::BF16, HalfFormat::F16}) {
    const auto th = halves(fmt, table);
    HB g_th(th);
    cpu::embedding_lookup(want.data(), ids.data(), nullptr, th.data(), fmt, v_begin, v_rows, N, C);
    gpu().embedding_lookup(stream(), g_out.get(), g_ids.get(), nullptr, g_th.get(), fmt, v_begin,
                           v_rows, N, C);
    EXPECT_TRUE(same_bits(g_out.host(), want));  // widening is exact
  }
}

TEST(cuda_kernels, embedding_accumulate_in_row_order) {
  MT_REQUIRE_GPU();
  const int64_t N = 74, C = 100, v_begin = 3, v_rows = 5;
  const auto ids = ints(N, 92, 0, 11);  // repeats, and ids of other shards
  const auto dout = uniform(N * C, 93);
  auto dtable = uniform(v_rows * C, 94);
  FB g_dtable(dtable), g_dout(dout);
  IB g_ids(ids);
  cpu::embedding_accumulate(dtable.data(), dout.data(), ids.data(), v_begin, v_rows, N, C);
  gpu().embedding_accumulate(stream(), g_dtable.get(), g_dout.get(), g_ids.get(), v_begin, v_rows, N,
                             C);
  EXPECT_TRUE(same_bits(g_dtable.host(), dtable));  // the CPU's order: the same bits
}

TEST(cuda_kernels, periodic_rows) {
  MT_REQUIRE_GPU();
  const int64_t C = 100;
  {
    const int64_t N = 74, period = 37, first = 5;
    const auto rows = uniform(period * C, 100);
    auto out = uniform(N * C, 101);
    FB g_out(out), g_rows(rows);
    cpu::add_periodic_rows(out.data(), rows.data(), N, C, period, first);
    gpu().add_periodic_rows(stream(), g_out.get(), g_rows.get(), N, C, period, first);
    EXPECT_TRUE(same_bits(g_out.host(), out));  // one addition each
  }
  // Few rows per residue (at most rows.cu's kDirectMax = 64; more take the
  // chunked sums): summed in the CPU's order, the same bits.
  for (int64_t period : {int64_t{1}, int64_t{37}}) {
    const int64_t N = 64;
    const auto d = uniform(N * C, 102);
    auto drows = uniform(period * C, 103);
    FB g_drows(drows), g_d(d);
    cpu::sum_periodic_rows(drows.data(), d.data(), N, C, period);
    gpu().sum_periodic_rows(stream(), g_drows.get(), g_d.get(), N, C, period);
    EXPECT_TRUE(same_bits(g_drows.host(), drows)) << "period " << period;
  }
  // Many rows per residue (fixed chunks): sums of up to 3001 terms in
  // another order, bounded by 16 sqrt(n) u sum|d|.
  for (int64_t period : {int64_t{1}, int64_t{3}}) {
    const int64_t N = 3001;
    const auto d = uniform(N * C, 104);
    const auto drows0 = uniform(period * C, 105);
    auto drows = drows0;
    std::vector<float> abs_sum(period * C, 0.f);
    cpu::sum_periodic_rows(drows.data(), d.data(), N, C, period);
    cpu::sum_periodic_rows(abs_sum.data(), abs_of(d).data(), N, C, period);
    FB g_drows(drows0), g_d(d);
    gpu().sum_periodic_rows(stream(), g_drows.get(), g_d.get(), N, C, period);
    const auto got = g_drows.host();
    EXPECT_TRUE(within(got, drows, gemm_bound(abs_sum, N / period + 1, drows0))) << "period " << period;
    FB g_again(drows0);
    gpu().sum_periodic_rows(stream(), g_again.get(), g_d.get(), N, C, period);
    EXPECT_TRUE(same_bits(g_again.host(), got)) << "deterministic, period " << period;
  }
}

TEST(cuda_kernels, softmax_cross_entropy_forward_backward) {
  MT_REQUIRE_GPU();
  const int64_t N = 33, V = 91, Vp = 96;
  auto targets = ints(N, 110, 0, V - 1);
  targets[3] = -1;  // ignored positions
  targets[17] = -1;
  const auto logits = uniform(N * Vp, 111, -4.f, 4.f);
  std::vector<float> losses(N), grad = logits;
  const int64_t counted = cpu::softmax_cross_entropy_forward(losses.data(), logits.data(),
                                                             targets.data(), N, V, Vp);
  cpu::softmax_cross_entropy_backward(grad.data(), targets.data(), 0.37f, N, V, Vp);
  FB g_losses(N), g_logits(logits);
  IB g_targets(targets);
  EXPECT_EQ(gpu().softmax_cross_entropy_forward(stream(), g_losses.get(), g_logits.get(),
                                                g_targets.get(), N, V, Vp),
            counted);
  // log of a sum of V exps in another order (and expf vs the CPU's exp):
  // ~V u relative on the sum, losses ~5: 2e-5 absolute.
  EXPECT_TRUE(close(g_losses.host(), losses, 2e-5, 1e-6));
  gpu().softmax_cross_entropy_backward(stream(), g_logits.get(), g_targets.get(), 0.37f, N, V, Vp);
  const auto g = g_logits.host();
  // Probabilities to a relative ~1e-5 (the log-sum-exp's error), times dloss.
  EXPECT_TRUE(close(g, grad, 1e-7, 2e-5));
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < Vp; ++j)
      if (targets[i] < 0 || j >= V) {
        EXPECT_EQ(g[i * Vp + j], 0.f) << "row " << i << " column " << j;
      }
}

TEST(cuda_kernels, kv_heads_expand_fold) {
  MT_REQUIRE_GPU();
  const int64_t N = 37, NH = 6, NKV = 2, hd = 20, C = NH * hd, Q = C + 2 * NKV * hd;
  const auto qkv = uniform(N * Q, 115), dfull = uniform(N * 3 * C, 116);
  std::vector<float> full(N * 3 * C), dqkv(N * Q);
  cpu::expand_kv_heads(full.data(), qkv.data(), N, NH, NKV, hd);
  cpu::fold_kv_heads(dqkv.data(), dfull.data(), N, NH, NKV, hd);
  FB g_qkv(qkv), g_full(N * 3 * C), g_dfull(dfull), g_dqkv(N * Q);
  gpu().expand_kv_heads(stream(), g_full.get(), g_qkv.get(), N, NH, NKV, hd);
  gpu().fold_kv_heads(stream(), g_dqkv.get(), g_dfull.get(), N, NH, NKV, hd);
  EXPECT_TRUE(same_bits(g_full.host(), full));  // copies
  EXPECT_TRUE(same_bits(g_dqkv.host(), dqkv));  // sums in the CPU's head order
}

TEST(cuda_kernels, vocab_shard_loss_pieces) {
  MT_REQUIRE_GPU();
  const int64_t N = 33, real = 45, stride = 48, v_begin = 46;  // the second shard of V = 91
  auto targets = ints(N, 117, 0, 90);
  targets[4] = -1;
  const auto logits = uniform(N * stride, 118, -4.f, 4.f);
  std::vector<float> maxes(N), scratch(2 * N), losses(N), grad = logits;
  cpu::vocab_shard_row_max(maxes.data(), logits.data(), N, real, stride);
  cpu::vocab_shard_sum_exp(scratch.data(), logits.data(), maxes.data(), targets.data(), N, real,
                           stride, v_begin);
  std::vector<float> lse = maxes;
  const int64_t counted = cpu::vocab_shard_losses(losses.data(), lse.data(), scratch.data(),
                                                  targets.data(), N);
  cpu::vocab_shard_backward(grad.data(), lse.data(), targets.data(), 0.5f, N, real, stride, v_begin);
  FB g_logits(logits), g_maxes(N), g_scratch(2 * N), g_losses(N), g_lse(N);
  IB g_targets(targets);
  gpu().vocab_shard_row_max(stream(), g_maxes.get(), g_logits.get(), N, real, stride);
  EXPECT_TRUE(same_bits(g_maxes.host(), maxes));  // a max is exact
  gpu().vocab_shard_sum_exp(stream(), g_scratch.get(), g_logits.get(), g_maxes.get(),
                            g_targets.get(), N, real, stride, v_begin);
  // Sums of 45 exps in another order (expf vs the CPU's exp): relative ~45 u.
  EXPECT_TRUE(close(g_scratch.host(), scratch, 0, 1e-5));
  g_scratch.upload(scratch);
  g_lse.upload(maxes);
  EXPECT_EQ(gpu().vocab_shard_losses(stream(), g_losses.get(), g_lse.get(), g_scratch.get(),
                                     g_targets.get(), N),
            counted);
  EXPECT_TRUE(close(g_lse.host(), lse, 1e-6, 1e-6));     // one log and one add
  EXPECT_TRUE(close(g_losses.host(), losses, 1e-6, 1e-6));
  g_lse.upload(lse);
  gpu().vocab_shard_backward(stream(), g_logits.get(), g_lse.get(), g_targets.get(), 0.5f, N, real,
                             stride, v_begin);
  EXPECT_TRUE(close(g_logits.host(), grad, 1e-7, 1e-5));  // exp to a few ulp, times dloss
}

// ---- Elementwise, reductions, conversions, the optimizer ------------------

TEST(cuda_kernels, copy_and_add_inplace) {
  MT_REQUIRE_GPU();
  const int64_t n = 100003;
  const auto a = uniform(n, 120), b = uniform(n, 121);
  FB g_a(a), g_out(n), g_b(b);
  gpu().copy(stream(), g_out.get(), g_a.get(), n);
  EXPECT_TRUE(same_bits(g_out.host(), a));
  std::vector<float> want = b;
  cpu::add_inplace(want.data(), a.data(), n);
  gpu().add_inplace(stream(), g_b.get(), g_a.get(), n);
  EXPECT_TRUE(same_bits(g_b.host(), want));  // one addition each
}

TEST(cuda_kernels, sum_squares) {
  MT_REQUIRE_GPU();
  for (int64_t n : {int64_t{1}, int64_t{37}, int64_t{1000003}}) {
    const auto x = uniform(n, 130, -3.f, 3.f);
    FB g_x(x);
    const double want = cpu::sum_squares(x.data(), n);
    const double got = gpu().sum_squares(stream(), g_x.get(), n);
    // The CPU sums f32 lanes over 65536-element chunks (relative ~1e-5
    // typical); the GPU sums in double: 1e-4 relative.
    EXPECT_NEAR(got, want, 1e-4 * want) << "n " << n;
    EXPECT_EQ(gpu().sum_squares(stream(), g_x.get(), n), got) << "deterministic, n " << n;
  }
  EXPECT_EQ(gpu().sum_squares(stream(), nullptr, 0), 0.0);
}

std::vector<float> conversion_inputs() {
  std::vector<float> v = uniform(5000, 140, -70000.f, 70000.f);
  const auto small = uniform(2000, 141, -1e-4f, 1e-4f);  // f16 subnormals
  v.insert(v.end(), small.begin(), small.end());
  const float inf = std::numeric_limits<float>::infinity();
  for (float x : {0.f, -0.f, inf, -inf, 65504.f, 65519.f, 65520.f, -65520.f, 5.96e-8f, 2.98e-8f,
                  2.99e-8f, 1e-45f, -1e-40f, 3.4e38f, 1.0f + 0x1p-8f, 1.0f + 0x1p-11f,
                  1.0f + 3 * 0x1p-11f})
    v.push_back(x);
  for (uint32_t bits : {0x7fc00000u, 0xffc00001u, 0x7f800001u, 0x7fa5a5a5u, 0xff912345u})
    v.push_back(bits_f32(bits));  // NaNs, quiet and signalling, with payloads
  return v;
}

TEST(cuda_kernels, to_half_from_half_exact) {
  MT_REQUIRE_GPU();
  const auto x = conversion_inputs();
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
  for (HalfFormat fmt : {HalfFormat::BF16, HalfFormat::F16}) {
    SCOPED_TRACE(fmt == HalfFormat::BF16 ? "bf16" : "f16");
    FB g_x(x), g_wide(65536);
    HB g_h(n), g_all(all);
    gpu().to_half(stream(), fmt, g_x.get(), g_h.get(), n);
    EXPECT_TRUE(same_bits(g_h.host(), halves(fmt, x)));
    gpu().from_half(stream(), fmt, g_all.get(), g_wide.get(), 65536);
    const auto got = g_wide.host(), want = widen(fmt, all);
    std::vector<uint32_t> gb(65536), wb(65536);
    for (size_t i = 0; i < 65536; ++i) {
      gb[i] = f32_bits(got[i]);
      wb[i] = f32_bits(want[i]);
    }
    EXPECT_TRUE(same_bits(gb, wb));  // every 16-bit pattern, NaNs included
  }
}

TEST(cuda_kernels, adamw_step) {
  MT_REQUIRE_GPU();
  const int64_t n = 10007;
  AdamWHyper h;
  h.lr = 1e-3f;
  h.weight_decay = 0.1f;
  h.grad_scale = 0.5f;
  h.step = 7;
  const auto p0 = uniform(n, 150), g = uniform(n, 151), m0 = uniform(n, 152, -0.1f, 0.1f);
  const auto v0 = uniform(n, 153, 0.f, 0.01f);
  auto p = p0, m = m0, v = v0;
  cpu::adamw_step(p.data(), g.data(), m.data(), v.data(), n, h);
  FB gp(p0), gg(g), gm(m0), gv(v0);
  gpu().adamw_step(stream(), gp.get(), gg.get(), gm.get(), gv.get(), n, h);
  // The same f32 formula; the GPU may fuse a multiply-add (one rounding
  // fewer): m and v within a few ulp, the parameter within an ulp of 1 plus
  // lr times a relative 1e-6 of the step. m = b1 m0 + (1 - b1) g cancels:
  // the unfused product's rounding (up to 7.5e-9 at |b1 m0| <= 0.09) stays
  // absolute, hence 1e-8.
  EXPECT_TRUE(close(gm.host(), m, 1e-8, 1e-6));
  EXPECT_TRUE(close(gv.host(), v, 1e-12, 1e-6));
  EXPECT_TRUE(close(gp.host(), p, 2e-7, 1e-6));
}

// SGD (first step, then momentum with Nesterov and a LARS trust ratio) as
// the CPU computes it; tolerances as adamw_step's (a fused multiply-add).
TEST(cuda_kernels, sgd_step) {
  MT_REQUIRE_GPU();
  const int64_t n = 10007;
  const auto p0 = uniform(n, 170), g = uniform(n, 171), b0 = uniform(n, 172, -0.1f, 0.1f);
  for (const bool first : {true, false}) {
    SCOPED_TRACE(first ? "first step" : "momentum, Nesterov, trust 0.3");
    SgdHyper h;
    h.lr = 0.05f;
    h.weight_decay = 0.01f;
    h.grad_scale = 0.5f;
    h.first = first;
    h.nesterov = !first;
    h.trust = first ? 1.0f : 0.3f;
    auto p = p0, b = b0;
    cpu::sgd_step(p.data(), g.data(), b.data(), n, h);
    FB gp(p0), gg(g), gb(b0);
    gpu().sgd_step(stream(), gp.get(), gg.get(), gb.get(), n, h);
    EXPECT_TRUE(close(gb.host(), b, 1e-8, 1e-6));
    EXPECT_TRUE(close(gp.host(), p, 2e-7, 1e-6));
  }
}

// LAMB's two passes: the moments and the update's sum of squares (double,
// summed in another order than the CPU's, so relative 1e-6), then the update.
TEST(cuda_kernels, lamb_moments_and_apply) {
  MT_REQUIRE_GPU();
  const int64_t n = 70001;
  LambHyper h;
  h.weight_decay = 0.01f;
  h.grad_scale = 0.5f;
  h.step = 3;
  const auto p0 = uniform(n, 180), g = uniform(n, 181), m0 = uniform(n, 182, -0.1f, 0.1f);
  const auto v0 = uniform(n, 183, 0.f, 0.01f);
  auto p = p0, m = m0, v = v0;
  const double want = cpu::lamb_moments(g.data(), m.data(), v.data(), p.data(), n, h);
  cpu::lamb_apply(p.data(), m.data(), v.data(), n, h, 0.02f);
  FB gp(p0), gg(g), gm(m0), gv(v0);
  const double got = gpu().lamb_moments(stream(), gg.get(), gm.get(), gv.get(), gp.get(), n, h);
  gpu().lamb_apply(stream(), gp.get(), gm.get(), gv.get(), n, h, 0.02f);
  EXPECT_NEAR(got, want, 1e-6 * want);
  EXPECT_TRUE(close(gm.host(), m, 1e-8, 1e-6));
  EXPECT_TRUE(close(gv.host(), v, 1e-12, 1e-6));
  EXPECT_TRUE(close(gp.host(), p, 2e-7, 1e-5));
}

// The ops that return a host value return the CPU's, on a stream of their own.
TEST(cuda_kernels, host_return_values_match_cpu) {
  MT_REQUIRE_GPU();
  cudaStream_t cs = nullptr;
  ASSERT_EQ(cudaStreamCreate(&cs), cudaSuccess);
  const Stream s{Device::cuda(0), cs};
  const int64_t N = 45, V = 91, Vp = 96;
  auto targets = ints(N, 160, -1, V - 1);
  const auto logits = uniform(N * Vp, 161, -3.f, 3.f);
  std::vector<float> losses(N);
  const int64_t counted =
      cpu::softmax_cross_entropy_forward(losses.data(), logits.data(), targets.data(), N, V, Vp);
  FB g_losses(N), g_logits(logits);
  IB g_targets(targets);
  EXPECT_EQ(gpu().softmax_cross_entropy_forward(s, g_losses.get(), g_logits.get(), g_targets.get(),
                                                N, V, Vp),
            counted);
  const auto x = uniform(70001, 162);
  FB g_x(x);
  const double want = cpu::sum_squares(x.data(), 70001);
  EXPECT_NEAR(gpu().sum_squares(s, g_x.get(), 70001), want, 1e-4 * want);  // as sum_squares above
  EXPECT_EQ(cudaStreamDestroy(cs), cudaSuccess);
}

INSTANTIATE_TEST_SUITE_P(formats, cuda_kernels_half,
                         ::testing::Values(HalfFormat::BF16, HalfFormat::F16),
                         [](const auto& info) {
                           return std::string(info.param == HalfFormat::BF16 ? "bf16" : "f16");
                         });

}  // namespace
}  // namespace meshtrain
