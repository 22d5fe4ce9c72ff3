// test-links: mt_kernels mt_core
// The image models' CPU kernels (issue 40): convolution (oneDNN against the
// double-accumulating reference, f32 and 16-bit), batch norm (against a
// double reference; the split form a synchronized batch norm uses against
// the fused one), ReLU, pooling, the classification loss and top-k, and each
// backward against central differences of its forward.
//
// Tolerances. u = 2^-24 (f32 unit roundoff). A sum of K products computed in
// f32 in any order is within K*u*sum|a_i b_i| of the exact one (the standard
// bound gamma_K ~ K u), and the reference sums in double, so oneDNN's
// convolutions are held to 2*K*u*M + 1e-7 per element, with M the reference
// run on |operands| (the sum of magnitudes) and K the accumulation length
// (C*KH*KW forward, OC*KH*KW backward-data, N*OH*OW backward-weights); the
// factor 2 covers the final rounding and the += of accumulated gradients. A
// wrong index or a missing term is off by O(M). 16-bit inputs are compared
// with the reference on the same rounded values: their products are exact
// in f32 (8- or 11-bit significands), so the same bound holds.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include "gradcheck.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/half.h"
#include "meshtrain/kernels/cpu/batchnorm.h"
#include "meshtrain/kernels/cpu/conv2d.h"
#include "meshtrain/kernels/cpu/image_reference.h"
#include "meshtrain/kernels/cpu/pooling.h"
#include "meshtrain/kernels/cpu/relu.h"
#include "meshtrain/kernels/cpu/softmax_cross_entropy.h"
#include "meshtrain/kernels/cpu/topk.h"
#include "meshtrain/kernels/kernel_table.h"

using namespace meshtrain;
using meshtrain::testing::expect_gradient;
using meshtrain::testing::randn;

namespace {

constexpr double kU = 1.0 / 16777216.0;  // 2^-24

using Vec = std::vector<float>;

Vec abs_of(const Vec& v) {
  Vec a(v.size());
  for (size_t i = 0; i < v.size(); ++i) a[i] = std::fabs(v[i]);
  return a;
}

// got within 2*K*u*mag + 1e-7 of want, elementwise (see the top).
void expect_within_sum_bound(const char* what, const Vec& got, const Vec& want, const Vec& mag,
                             int64_t K) {
  ASSERT_EQ(got.size(), want.size());
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double tol = 2.0 * K * kU * mag[i] + 1e-7;
    worst = std::max(worst, std::fabs(got[i] - want[i]) / tol);
    ASSERT_NEAR(got[i], want[i], tol) << what << " element " << i;
  }
  ::testing::Test::RecordProperty(what, std::to_string(worst));
}

std::string describe(const Conv2dShape& s) {
  return "N" + std::to_string(s.N) + " C" + std::to_string(s.C) + " " + std::to_string(s.H) +
         "x" + std::to_string(s.W) + " OC" + std::to_string(s.OC) + " k" + std::to_string(s.KH) +
         "x" + std::to_string(s.KW) + " s" + std::to_string(s.stride_h) + "x" +
         std::to_string(s.stride_w) + " p" + std::to_string(s.pad_h) + "x" +
         std::to_string(s.pad_w);
}

Conv2dShape conv(int64_t N, int64_t C, int64_t H, int64_t W, int64_t OC, int64_t KH, int64_t KW,
                 int64_t sh, int64_t sw, int64_t ph, int64_t pw) {
  Conv2dShape s;
  s.N = N, s.C = C, s.H = H, s.W = W, s.OC = OC, s.KH = KH, s.KW = KW;
  s.stride_h = sh, s.stride_w = sw, s.pad_h = ph, s.pad_w = pw;
  return s;
}

// ResNet's convolutions in small: 3x3 same, 3x3 stride 2, 1x1, the 1x1
// stride-2 downsample, the 7x7 stride-2 stem, batch 1, odd H/W, C not a
// multiple of 8, and an asymmetric kernel, stride and padding.
std::vector<Conv2dShape> conv_shapes() {
  return {conv(2, 3, 9, 7, 5, 3, 3, 1, 1, 1, 1),   conv(2, 5, 11, 9, 6, 3, 3, 2, 2, 1, 1),
          conv(3, 12, 5, 5, 10, 1, 1, 1, 1, 0, 0), conv(2, 6, 7, 9, 10, 1, 1, 2, 2, 0, 0),
          conv(1, 3, 23, 19, 8, 7, 7, 2, 2, 3, 3), conv(1, 3, 6, 10, 4, 3, 5, 1, 2, 1, 2),
          conv(1, 17, 13, 13, 9, 3, 3, 1, 1, 1, 1)};
}

Vec round_to(HalfFormat fmt, const Vec& x, std::vector<uint16_t>* bits) {
  bits->resize(x.size());
  Vec r(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    (*bits)[i] = fmt == HalfFormat::BF16 ? f32_to_bf16(x[i]) : f32_to_f16(x[i]);
    r[i] = fmt == HalfFormat::BF16 ? bf16_to_f32((*bits)[i]) : f16_to_f32((*bits)[i]);
  }
  return r;
}

// Runs f32 convolutions (all three passes) for s and compares with the reference.
void check_conv_f32(const Conv2dShape& s, uint64_t seed) {
  SCOPED_TRACE(describe(s));
  const Vec x = randn(s.in_numel(), seed), w = randn(s.weight_numel(), seed + 1),
            b = randn(s.OC, seed + 2), g = randn(s.out_numel(), seed + 3);
  const Vec ax = abs_of(x), aw = abs_of(w), ab = abs_of(b), ag = abs_of(g);
  const int64_t OHW = s.OH() * s.OW();
  Vec got(s.out_numel()), want(s.out_numel()), mag(s.out_numel());
  for (const float* bias : {b.data(), static_cast<const float*>(nullptr)}) {
    cpu::conv2d_forward(got.data(), x.data(), w.data(), bias, s);
    cpu::conv2d_forward_reference(want.data(), x.data(), w.data(), bias, s);
    cpu::conv2d_forward_reference(mag.data(), ax.data(), aw.data(), bias ? ab.data() : nullptr, s);
    expect_within_sum_bound("forward", got, want, mag, s.C * s.KH * s.KW + 1);
  }
  Vec dx(s.in_numel(), 7.0f), dx_ref(s.in_numel()), dx_mag(s.in_numel());
  cpu::conv2d_backward_data(dx.data(), g.data(), w.data(), s);  // overwrites the 7s
  cpu::conv2d_backward_data_reference(dx_ref.data(), g.data(), w.data(), s);
  cpu::conv2d_backward_data_reference(dx_mag.data(), ag.data(), aw.data(), s);
  expect_within_sum_bound("backward_data", dx, dx_ref, dx_mag, s.OC * s.KH * s.KW);
  // Parameter gradients accumulate onto what is there.
  const Vec w0 = randn(s.weight_numel(), seed + 4), b0 = randn(s.OC, seed + 5);
  Vec dw = w0, db = b0, dw_ref = w0, db_ref = b0;
  Vec dw_mag = abs_of(w0), db_mag = abs_of(b0);
  cpu::conv2d_backward_weights(dw.data(), db.data(), g.data(), x.data(), s);
  cpu::conv2d_backward_weights_reference(dw_ref.data(), db_ref.data(), g.data(), x.data(), s);
  cpu::conv2d_backward_weights_reference(dw_mag.data(), db_mag.data(), ag.data(), ax.data(), s);
  expect_within_sum_bound("backward_weights", dw, dw_ref, dw_mag, s.N * OHW + 1);
  expect_within_sum_bound("backward_bias", db, db_ref, db_mag, s.N * OHW + 1);
  Vec dw_nobias = w0;  // no bias gradient asked for
  cpu::conv2d_backward_weights(dw_nobias.data(), nullptr, g.data(), x.data(), s);
  expect_within_sum_bound("backward_weights_no_bias", dw_nobias, dw_ref, dw_mag, s.N * OHW + 1);
}

// The same with 16-bit inputs, against the f32 reference on the rounded values.
void check_conv_half(HalfFormat fmt, const Conv2dShape& s, uint64_t seed) {
  SCOPED_TRACE(describe(s) + (fmt == HalfFormat::BF16 ? " bf16" : " f16"));
  std::vector<uint16_t> xh, wh, gh;
  const Vec x = round_to(fmt, randn(s.in_numel(), seed), &xh);
  const Vec w = round_to(fmt, randn(s.weight_numel(), seed + 1), &wh);
  const Vec g = round_to(fmt, randn(s.out_numel(), seed + 3), &gh);
  const Vec b = randn(s.OC, seed + 2);
  const Vec ax = abs_of(x), aw = abs_of(w), ab = abs_of(b), ag = abs_of(g);
  Vec got(s.out_numel()), want(s.out_numel()), mag(s.out_numel());
  cpu::conv2d_forward_half(fmt, got.data(), xh.data(), wh.data(), b.data(), s);
  cpu::conv2d_forward_reference(want.data(), x.data(), w.data(), b.data(), s);
  cpu::conv2d_forward_reference(mag.data(), ax.data(), aw.data(), ab.data(), s);
  expect_within_sum_bound("forward_half", got, want, mag, s.C * s.KH * s.KW + 1);
  Vec dx(s.in_numel()), dx_ref(s.in_numel()), dx_mag(s.in_numel());
  cpu::conv2d_backward_data_half(fmt, dx.data(), gh.data(), wh.data(), s);
  cpu::conv2d_backward_data_reference(dx_ref.data(), g.data(), w.data(), s);
  cpu::conv2d_backward_data_reference(dx_mag.data(), ag.data(), aw.data(), s);
  expect_within_sum_bound("backward_data_half", dx, dx_ref, dx_mag, s.OC * s.KH * s.KW);
  const int64_t K = s.N * s.OH() * s.OW() + 1;
  Vec dw(s.weight_numel(), 0.5f), db(s.OC, 0.5f), dw_ref = dw, db_ref = db, dw_mag = dw,
      db_mag = db;
  cpu::conv2d_backward_weights_half(fmt, dw.data(), db.data(), gh.data(), xh.data(), s);
  cpu::conv2d_backward_weights_reference(dw_ref.data(), db_ref.data(), g.data(), x.data(), s);
  cpu::conv2d_backward_weights_reference(dw_mag.data(), db_mag.data(), ag.data(), ax.data(), s);
  expect_within_sum_bound("backward_weights_half", dw, dw_ref, dw_mag, K);
  expect_within_sum_bound("backward_bias_half", db, db_ref, db_mag, K);
}

// Runs a test's convolutions on one backend, restoring the default after.
struct ScopedConvBackend {
  explicit ScopedConvBackend(cpu::ConvBackend b) { cpu::set_conv2d_backend(b); }
  ~ScopedConvBackend() { cpu::set_conv2d_backend(cpu::kDefaultConvBackend); }
};
struct ForceReferenceConv : ScopedConvBackend {
  ForceReferenceConv() : ScopedConvBackend(cpu::ConvBackend::Reference) {}
};
constexpr cpu::ConvBackend kOneDnnLayouts[] = {cpu::ConvBackend::OneDnnBlocked,
                                               cpu::ConvBackend::OneDnnPlain};
const char* name(cpu::ConvBackend b) {
  return b == cpu::ConvBackend::OneDnnBlocked ? "oneDNN layouts"
         : b == cpu::ConvBackend::OneDnnPlain ? "plain NCHW"
         : b == cpu::ConvBackend::OneDnnAuto  ? "auto"
                                              : "reference";
}

}  // namespace

// ---- convolution ---------------------------------------------------------

TEST(image_kernels, conv2d_f32_matches_the_reference) {
  uint64_t seed = 10;
  for (cpu::ConvBackend backend : kOneDnnLayouts)
  for (const Conv2dShape& s : conv_shapes()) {
    ScopedConvBackend use(backend);
    SCOPED_TRACE(name(backend));
    std::printf("%s %s: forward %s | backward data %s | weights %s\n", name(backend),
                describe(s).c_str(),
                cpu::conv2d_path(cpu::ConvPass::Forward, cpu::ConvData::F32, s).c_str(),
                cpu::conv2d_path(cpu::ConvPass::BackwardData, cpu::ConvData::F32, s).c_str(),
                cpu::conv2d_path(cpu::ConvPass::BackwardWeights, cpu::ConvData::F32, s).c_str());
#if defined(MESHTRAIN_HAVE_DNNL)
    // oneDNN has f32 convolutions at every ISA: a fallback here is a bug
    // (e.g. a descriptor it rejects), which the comparison alone would miss.
    for (auto pass : {cpu::ConvPass::Forward, cpu::ConvPass::BackwardData,
                      cpu::ConvPass::BackwardWeights})
      EXPECT_EQ(cpu::conv2d_path(pass, cpu::ConvData::F32, s).rfind("onednn", 0), 0u);
#endif
    check_conv_f32(s, seed += 10);
  }
}

// More than 65536 weights (ResNet-50's wider convolutions): the accumulation
// of oneDNN's weight gradient into the table's runs on several threads.
TEST(image_kernels, conv2d_weight_gradient_of_many_weights_on_two_threads) {
  const int before = omp_get_max_threads();
  omp_set_num_threads(2);
  check_conv_f32(Conv2dShape{2, 96, 5, 5, 96, 3, 3, 1, 1, 1, 1}, 77);  // 82,944 weights
  omp_set_num_threads(before);
}

TEST(image_kernels, conv2d_half_matches_the_f32_reference_on_rounded_inputs) {
  uint64_t seed = 100;
  for (cpu::ConvBackend backend : kOneDnnLayouts)
  for (HalfFormat fmt : {HalfFormat::BF16, HalfFormat::F16})
    for (const Conv2dShape& s : conv_shapes()) {
      ScopedConvBackend use(backend);
      SCOPED_TRACE(name(backend));
      const auto data = fmt == HalfFormat::BF16 ? cpu::ConvData::BF16 : cpu::ConvData::F16;
      if (s.KH == 7 || s.C == 17)
        std::printf("%s %s %s: forward %s | backward data %s | weights %s\n", name(backend),
                    describe(s).c_str(),
                    fmt == HalfFormat::BF16 ? "bf16" : "f16",
                    cpu::conv2d_path(cpu::ConvPass::Forward, data, s).c_str(),
                    cpu::conv2d_path(cpu::ConvPass::BackwardData, data, s).c_str(),
                    cpu::conv2d_path(cpu::ConvPass::BackwardWeights, data, s).c_str());
      check_conv_half(fmt, s, seed += 10);
    }
}

// What runs without oneDNN (the aarch64 build) or where it has no 16-bit
// convolution: the reference, and 16-bit inputs widened to it.
TEST(image_kernels, conv2d_fallbacks_match_the_reference) {
  ForceReferenceConv force;
  const Conv2dShape s = conv(2, 5, 11, 9, 6, 3, 3, 2, 2, 1, 1);
  EXPECT_EQ(cpu::conv2d_path(cpu::ConvPass::Forward, cpu::ConvData::F32, s), "reference");
  EXPECT_EQ(cpu::conv2d_path(cpu::ConvPass::Forward, cpu::ConvData::BF16, s),
            "widened to f32, then reference");
  check_conv_f32(s, 500);
  check_conv_half(HalfFormat::BF16, s, 510);
  check_conv_half(HalfFormat::F16, conv(1, 3, 23, 19, 8, 7, 7, 2, 2, 3, 3), 520);
}

// The backward passes are the forward's derivatives: with a linear loss
// sum(g * conv(x, w) + b) the central difference has no truncation error,
// only rounding (gradcheck.h's defaults, reasoned there).
TEST(image_kernels, conv2d_backward_matches_finite_differences) {
  for (cpu::ConvBackend backend : kOneDnnLayouts)
  for (const Conv2dShape& s : {conv(1, 2, 5, 6, 3, 3, 3, 2, 2, 1, 1),
                               conv(2, 3, 9, 9, 2, 7, 7, 2, 2, 3, 3),
                               conv(1, 4, 3, 5, 3, 1, 1, 2, 2, 0, 0)}) {
    ScopedConvBackend use(backend);
    SCOPED_TRACE(describe(s) + " " + name(backend));
    Vec x = randn(s.in_numel(), 1), w = randn(s.weight_numel(), 2), b = randn(s.OC, 3);
    const Vec g = randn(s.out_numel(), 4);
    Vec out(s.out_numel());
    auto loss = [&] {
      cpu::conv2d_forward(out.data(), x.data(), w.data(), b.data(), s);
      return meshtrain::testing::dot(g, out.data());
    };
    Vec dx(s.in_numel()), dw(s.weight_numel(), 0.0f), db(s.OC, 0.0f);
    cpu::conv2d_backward_data(dx.data(), g.data(), w.data(), s);
    cpu::conv2d_backward_weights(dw.data(), db.data(), g.data(), x.data(), s);
    expect_gradient("conv dinp", x, dx, loss);
    expect_gradient("conv dweight", w, dw, loss);
    expect_gradient("conv dbias", b, db, loss);
  }
}

TEST(image_kernels, conv2d_rejects_a_kernel_larger_than_its_padded_input) {
  const Conv2dShape s = conv(1, 1, 2, 2, 1, 5, 5, 1, 1, 1, 1);
  Vec x(4), w(25), out(1);
  EXPECT_THROW(cpu::conv2d_forward(out.data(), x.data(), w.data(), nullptr, s), Error);
}

// ---- batch norm ----------------------------------------------------------

namespace {

struct BnRef {
  std::vector<double> mean, rstd, out;
};

// Two-pass statistics in double: the definition, with the biased variance.
BnRef batchnorm_reference(const Vec& x, const Vec& w, const Vec& b, int64_t N, int64_t C,
                          int64_t HW, double eps) {
  BnRef r{std::vector<double>(C), std::vector<double>(C), std::vector<double>(x.size())};
  const double count = double(N * HW);
  for (int64_t c = 0; c < C; ++c) {
    double s = 0, v = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < HW; ++i) s += x[(n * C + c) * HW + i];
    const double m = s / count;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < HW; ++i) v += std::pow(x[(n * C + c) * HW + i] - m, 2);
    r.mean[c] = m;
    r.rstd[c] = 1.0 / std::sqrt(v / count + eps);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < HW; ++i) {
        const size_t k = (n * C + c) * HW + i;
        r.out[k] = (x[k] - m) * r.rstd[c] * w[c] + b[c];
      }
  }
  return r;
}

// Inputs whose channels sit at different offsets and scales (one far from 0,
// where sum(x^2)/n - mean^2 cancels: |mean|/std = 100).
Vec bn_input(int64_t N, int64_t C, int64_t HW, uint64_t seed) {
  Vec x = randn(N * C * HW, seed);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < HW; ++i) {
        float& v = x[(n * C + c) * HW + i];
        v = c == 1 ? 100.0f + v : (0.5f + c) * v + 0.25f * c;
      }
  return x;
}

}  // namespace

// Each output is (x - mean) * rstd * w + b in f32 from a mean and rstd
// rounded to f32 (relative 6e-8 each): ~4 roundings of values ~|xhat w|, so
// within 1e-6 (|xhat| <= 5 here) plus |x| * 6e-8 * rstd for the mean's
// rounding (the offset channel: 100 * 6e-8 / 1 = 6e-6); 2e-5 holds both
// with margin. The unbiased variance instead of the biased one (count 18:
// 3%) or a wrong channel stride is off by far more.
TEST(image_kernels, batchnorm_training_forward_matches_the_double_reference) {
  const int64_t N = 2, C = 5, HW = 3 * 3;
  const float eps = 1e-5f;
  const Vec x = bn_input(N, C, HW, 7), w = randn(C, 8), b = randn(C, 9);
  const BnRef ref = batchnorm_reference(x, w, b, N, C, HW, eps);
  Vec out(x.size()), mean(C), rstd(C);
  cpu::batchnorm_forward_training(out.data(), mean.data(), rstd.data(), x.data(), w.data(),
                                  b.data(), N, C, HW, eps);
  for (int64_t c = 0; c < C; ++c) {
    EXPECT_NEAR(mean[c], ref.mean[c], 2e-7 * std::fabs(ref.mean[c]) + 1e-7) << "channel " << c;
    EXPECT_NEAR(rstd[c], ref.rstd[c], 1e-6 * ref.rstd[c]) << "channel " << c;
  }
  for (size_t i = 0; i < out.size(); ++i) EXPECT_NEAR(out[i], ref.out[i], 2e-5) << i;
  // Inference with running statistics equal to the batch's (var from rstd).
  Vec run_mean(C), run_var(C), inf(x.size());
  for (int64_t c = 0; c < C; ++c) {
    run_mean[c] = static_cast<float>(ref.mean[c]);
    run_var[c] = static_cast<float>(1.0 / (ref.rstd[c] * ref.rstd[c]) - eps);
  }
  cpu::batchnorm_forward_inference(inf.data(), x.data(), run_mean.data(), run_var.data(),
                                   w.data(), b.data(), N, C, HW, eps);
  for (size_t i = 0; i < out.size(); ++i) EXPECT_NEAR(inf[i], ref.out[i], 2e-5) << i;
}

// PyTorch's update: momentum-weighted, with the unbiased batch variance.
TEST(image_kernels, batchnorm_running_statistics_use_the_unbiased_variance) {
  const int64_t N = 3, C = 2, HW = 4, count = N * HW;
  const Vec x = bn_input(N, C, HW, 11);
  std::vector<double> sums(2 * C);
  cpu::batchnorm_partial_sums(sums.data(), sums.data() + C, x.data(), N, C, HW);
  Vec rm = {0.5f, -1.0f}, rv = {2.0f, 0.25f};
  const Vec rm0 = rm, rv0 = rv;
  const float m = 0.1f;
  cpu::batchnorm_update_running(rm.data(), rv.data(), sums.data(), sums.data() + C, count, C, m);
  const BnRef ref = batchnorm_reference(x, Vec(C, 1.0f), Vec(C, 0.0f), N, C, HW, 0.0);
  for (int64_t c = 0; c < C; ++c) {
    const double var = 1.0 / (ref.rstd[c] * ref.rstd[c]) * count / (count - 1);
    EXPECT_NEAR(rm[c], (1 - m) * rm0[c] + m * ref.mean[c], 1e-5);
    EXPECT_NEAR(rv[c], (1 - m) * rv0[c] + m * var, 1e-5 * var + 1e-6);
  }
  EXPECT_THROW(cpu::batchnorm_update_running(rm.data(), rv.data(), sums.data(), sums.data() + C,
                                             1, C, m),
               Error);
}

// Synchronized batch norm: ranks compute partial sums, add them (the
// allreduce) and normalize their own samples with the global statistics.
// One rank is the fused pass bit for bit; two ranks (2 + 2 and 3 + 1 samples)
// differ only by the order of the double sums, so the f32 statistics match
// to an ulp or two and the outputs and gradients to 1e-6 (relative to 1).
TEST(image_kernels, batchnorm_split_form_equals_the_fused_one) {
  const int64_t N = 4, C = 3, HW = 5 * 3, count = N * HW;
  const float eps = 1e-5f;
  const Vec x = bn_input(N, C, HW, 21), w = randn(C, 22), b = randn(C, 23), g = randn(x.size(), 24);
  Vec out(x.size()), mean(C), rstd(C), dx(x.size()), dw(C, 0.5f), db(C, -0.5f);
  cpu::batchnorm_forward_training(out.data(), mean.data(), rstd.data(), x.data(), w.data(),
                                  b.data(), N, C, HW, eps);
  cpu::batchnorm_backward(dx.data(), dw.data(), db.data(), g.data(), x.data(), mean.data(),
                          rstd.data(), w.data(), N, C, HW);
  for (int64_t first : {N, int64_t{2}, int64_t{3}}) {  // rank 0's samples; rank 1 has the rest
    SCOPED_TRACE("rank 0 has " + std::to_string(first) + " of " + std::to_string(N));
    const int64_t n_of[2] = {first, N - first}, off[2] = {0, first * C * HW};
    std::vector<double> sums(2 * C, 0.0), part(2 * C);
    for (int r = 0; r < 2; ++r) {
      if (n_of[r] == 0) continue;
      cpu::batchnorm_partial_sums(part.data(), part.data() + C, x.data() + off[r], n_of[r], C, HW);
      for (int64_t i = 0; i < 2 * C; ++i) sums[i] += part[i];
    }
    Vec m2(C), r2(C), out2(x.size()), dx2(x.size()), dw2(C, 0.5f), db2(C, -0.5f);
    cpu::batchnorm_stats(m2.data(), r2.data(), sums.data(), sums.data() + C, count, C, eps);
    std::vector<double> gsums(2 * C, 0.0);
    for (int r = 0; r < 2; ++r) {
      if (n_of[r] == 0) continue;
      cpu::batchnorm_normalize(out2.data() + off[r], x.data() + off[r], m2.data(), r2.data(),
                               w.data(), b.data(), n_of[r], C, HW);
      cpu::batchnorm_backward_partial_sums(part.data(), part.data() + C, g.data() + off[r],
                                           x.data() + off[r], m2.data(), r2.data(), n_of[r], C, HW);
      for (int64_t i = 0; i < 2 * C; ++i) gsums[i] += part[i];
    }
    cpu::batchnorm_backward_params(dw2.data(), db2.data(), gsums.data(), gsums.data() + C, C);
    for (int r = 0; r < 2; ++r)
      if (n_of[r] > 0)
        cpu::batchnorm_backward_input(dx2.data() + off[r], g.data() + off[r], x.data() + off[r],
                                      m2.data(), r2.data(), w.data(), gsums.data(),
                                      gsums.data() + C, count, n_of[r], C, HW);
    if (first == N) {  // one rank: the same operations, the same bits
      EXPECT_EQ(m2, mean);
      EXPECT_EQ(r2, rstd);
      EXPECT_EQ(out2, out);
      EXPECT_EQ(dx2, dx);
      EXPECT_EQ(dw2, dw);
      EXPECT_EQ(db2, db);
      continue;
    }
    for (int64_t c = 0; c < C; ++c) {
      EXPECT_NEAR(m2[c], mean[c], 2.5e-7 * std::fabs(mean[c]));
      EXPECT_NEAR(r2[c], rstd[c], 2.5e-7 * rstd[c]);
      EXPECT_NEAR(dw2[c], dw[c], 1e-6 * (1 + std::fabs(dw[c])));
      EXPECT_NEAR(db2[c], db[c], 1e-6 * (1 + std::fabs(db[c])));
    }
    for (size_t i = 0; i < x.size(); ++i) {
      // An ulp of the offset channel's mean (7.6e-6 at 100) times rstd |w| (<= 3 here).
      EXPECT_NEAR(out2[i], out[i], 4e-5) << i;
      EXPECT_NEAR(dx2[i], dx[i], 1e-5 * (1 + std::fabs(dx[i]))) << i;
    }
  }
}

// The backward of the training forward (statistics recomputed in the loss):
// nonlinear, so the central difference has truncation error eps^2/6 |f'''|
// besides rounding; gradcheck.h's defaults cover both at these sizes.
TEST(image_kernels, batchnorm_backward_matches_finite_differences) {
  const int64_t N = 2, C = 3, HW = 2 * 3;
  Vec x = randn(N * C * HW, 31), w = randn(C, 32), b = randn(C, 33);
  const Vec g = randn(x.size(), 34);
  Vec out(x.size()), mean(C), rstd(C);
  auto loss = [&] {
    cpu::batchnorm_forward_training(out.data(), mean.data(), rstd.data(), x.data(), w.data(),
                                    b.data(), N, C, HW, 1e-5f);
    return meshtrain::testing::dot(g, out.data());
  };
  loss();
  Vec dx(x.size()), dw(C, 0.0f), db(C, 0.0f);
  cpu::batchnorm_backward(dx.data(), dw.data(), db.data(), g.data(), x.data(), mean.data(),
                          rstd.data(), w.data(), N, C, HW);
  expect_gradient("bn dinp", x, dx, loss);
  expect_gradient("bn dweight", w, dw, loss);
  expect_gradient("bn dbias", b, db, loss);
}

// ---- ReLU, pooling -------------------------------------------------------

TEST(image_kernels, relu_in_place_and_its_backward_from_the_output) {
  Vec x = {-2.0f, -0.0f, 0.0f, 1e-30f, 3.5f, -1e-30f, NAN};
  const Vec x0 = x;
  cpu::relu_forward(x.data(), x.data(), static_cast<int64_t>(x.size()));  // in place
  const Vec want = {0.0f, 0.0f, 0.0f, 1e-30f, 3.5f, 0.0f};
  for (size_t i = 0; i + 1 < x.size(); ++i) EXPECT_EQ(x[i], want[i]) << i;
  EXPECT_TRUE(std::isnan(x.back()));
  Vec d = {1, 2, 3, 4, 5, 6, 7};
  cpu::relu_backward(d.data(), d.data(), x.data(), static_cast<int64_t>(d.size()));  // in place
  const Vec dwant = {0, 0, 0, 4, 5, 0, 0};
  EXPECT_EQ(d, dwant);
  (void)x0;
}

TEST(image_kernels, max_pool_picks_the_window_maximum_and_routes_its_gradient) {
  // ResNet's stem pool (3x3, stride 2, pad 1) on a 5x5 plane: out 3x3.
  Pool2dShape s;
  s.N = 1, s.C = 1, s.H = 5, s.W = 5, s.KH = 3, s.KW = 3, s.stride_h = 2, s.stride_w = 2,
  s.pad_h = 1, s.pad_w = 1;
  ASSERT_EQ(s.OH(), 3);
  Vec x(25);
  for (int i = 0; i < 25; ++i) x[i] = static_cast<float>((i * 7) % 25);  // a permutation of 0..24
  Vec out(9);
  std::vector<int32_t> idx(9);
  cpu::max_pool2d_forward(out.data(), idx.data(), x.data(), s);
  for (int oh = 0; oh < 3; ++oh)
    for (int ow = 0; ow < 3; ++ow) {
      float best = -1;
      int at = -1;
      for (int h = 2 * oh - 1; h <= 2 * oh + 1; ++h)
        for (int w = 2 * ow - 1; w <= 2 * ow + 1; ++w)
          if (h >= 0 && h < 5 && w >= 0 && w < 5 && x[h * 5 + w] > best) best = x[h * 5 + w], at = h * 5 + w;
      EXPECT_EQ(out[oh * 3 + ow], best);
      EXPECT_EQ(idx[oh * 3 + ow], at);
    }
  // Ties go to the first in row order; all-negative windows stay negative (padding is -inf).
  Vec t = {-3, -1, -1, -2};
  Pool2dShape s2 = s;
  s2.H = s2.W = 2, s2.KH = s2.KW = 2, s2.stride_h = s2.stride_w = 2, s2.pad_h = s2.pad_w = 1;
  Vec o2(s2.out_numel());
  std::vector<int32_t> i2(o2.size());
  cpu::max_pool2d_forward(o2.data(), i2.data(), t.data(), s2);
  EXPECT_EQ(o2, (Vec{-3, -1, -1, -2}));
  s2.pad_h = s2.pad_w = 0;
  cpu::max_pool2d_forward(o2.data(), i2.data(), t.data(), s2);
  EXPECT_EQ(o2[0], -1.0f);
  EXPECT_EQ(i2[0], 1);
}

TEST(image_kernels, pooling_backward_matches_finite_differences) {
  Pool2dShape s;
  s.N = 2, s.C = 3, s.H = 7, s.W = 6, s.KH = 3, s.KW = 3, s.stride_h = 2, s.stride_w = 2,
  s.pad_h = 1, s.pad_w = 1;
  // Distinct values 0.1 apart, so a step of 1e-2 never moves an argmax.
  Vec x(s.in_numel());
  std::iota(x.begin(), x.end(), 0.0f);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.1f * static_cast<float>((i * 37) % x.size());
  const Vec g = randn(s.out_numel(), 41);
  Vec out(s.out_numel()), dx(x.size(), 9.0f);
  std::vector<int32_t> idx(out.size());
  auto max_loss = [&] {
    cpu::max_pool2d_forward(out.data(), idx.data(), x.data(), s);
    return meshtrain::testing::dot(g, out.data());
  };
  max_loss();
  cpu::max_pool2d_backward(dx.data(), g.data(), idx.data(), s);
  expect_gradient("max_pool dinp", x, dx, max_loss, 1e-2f, 2e-2, 1e-3, x.size());
  auto avg_loss = [&] {
    cpu::avg_pool2d_forward(out.data(), x.data(), s);
    return meshtrain::testing::dot(g, out.data());
  };
  std::fill(dx.begin(), dx.end(), 9.0f);
  cpu::avg_pool2d_backward(dx.data(), g.data(), s);
  expect_gradient("avg_pool dinp", x, dx, avg_loss, 1e-2f, 2e-2, 1e-3, x.size());
  // count_include_pad: the corner window holds 4 inputs and divides by 9.
  cpu::avg_pool2d_forward(out.data(), x.data(), s);
  EXPECT_FLOAT_EQ(out[0], (x[0] + x[1] + x[6] + x[7]) / 9.0f);
  // Global average pooling (N, C, 7, 6) -> (N, C).
  const int64_t NC = s.N * s.C, HW = s.H * s.W;
  Vec gout(NC), gg = randn(NC, 42);
  auto gap_loss = [&] {
    cpu::global_avg_pool_forward(gout.data(), x.data(), s.N, s.C, HW);
    return meshtrain::testing::dot(gg, gout.data());
  };
  gap_loss();
  for (int64_t p = 0; p < NC; ++p)
    EXPECT_NEAR(gout[p], std::accumulate(x.begin() + p * HW, x.begin() + (p + 1) * HW, 0.0) / HW,
                1e-5);
  cpu::global_avg_pool_backward(dx.data(), gg.data(), s.N, s.C, HW);
  expect_gradient("global_avg_pool dinp", x, dx, gap_loss);
}

// ---- the classifier's loss and accuracy ----------------------------------

// The language models' fused loss serves classification as it is: logits
// (N, V) with Vp = V, int32 labels, < 0 ignored.
TEST(image_kernels, softmax_cross_entropy_serves_classification) {
  const int64_t N = 5, V = 10;
  Vec logits = randn(N * V, 51, 3.0f);
  const std::vector<int32_t> labels = {3, -1, 0, 9, 7};
  Vec losses(N);
  EXPECT_EQ(cpu::softmax_cross_entropy_forward(losses.data(), logits.data(), labels.data(), N, V, V), 4);
  std::vector<double> want_grad(N * V, 0.0);
  for (int64_t i = 0; i < N; ++i) {
    double mx = -1e30, s = 0;
    for (int64_t v = 0; v < V; ++v) mx = std::max<double>(mx, logits[i * V + v]);
    for (int64_t v = 0; v < V; ++v) s += std::exp(logits[i * V + v] - mx);
    if (labels[i] < 0) {
      EXPECT_EQ(losses[i], 0.0f);
      continue;
    }
    EXPECT_NEAR(losses[i], std::log(s) + mx - logits[i * V + labels[i]], 1e-5);
    for (int64_t v = 0; v < V; ++v)
      want_grad[i * V + v] = 0.5 * (std::exp(logits[i * V + v] - mx) / s - (v == labels[i]));
  }
  cpu::softmax_cross_entropy_backward(logits.data(), labels.data(), 0.5f, N, V, V);
  for (int64_t i = 0; i < N * V; ++i) EXPECT_NEAR(logits[i], want_grad[i], 1e-6) << i;
}

TEST(image_kernels, topk_counts_rows_with_the_label_among_the_k_best) {
  const int64_t N = 64, V = 13, Vp = 16;
  Vec logits = randn(N * Vp, 61);
  std::vector<int32_t> labels(N);
  for (int64_t i = 0; i < N; ++i) labels[i] = static_cast<int32_t>((i * 5) % V);
  labels[3] = -1;
  logits[7 * Vp + V] = 1e9f;  // a padded column never counts
  for (int64_t k : {1, 5, 13}) {
    int64_t want = 0;
    for (int64_t i = 0; i < N; ++i) {
      if (labels[i] < 0) continue;
      int64_t above = 0;
      for (int64_t v = 0; v < V; ++v) above += logits[i * Vp + v] > logits[i * Vp + labels[i]];
      want += above < k;
    }
    EXPECT_EQ(cpu::topk_correct(logits.data(), labels.data(), N, V, Vp, k), want) << "k " << k;
  }
  EXPECT_EQ(cpu::topk_correct(logits.data(), labels.data(), N, V, Vp, V), N - 1);
  // Ties go to the label; a NaN label score is wrong.
  const Vec tie = {1, 2, 2, 0};
  const int32_t two = 2;
  EXPECT_EQ(cpu::topk_correct(tie.data(), &two, 1, 4, 4, 1), 1);
  const Vec nan_row = {1, NAN, 0, 0};
  const int32_t one = 1;
  EXPECT_EQ(cpu::topk_correct(nan_row.data(), &one, 1, 4, 4, 4), 0);
  const int32_t bad = 4;
  EXPECT_THROW(cpu::topk_correct(tie.data(), &bad, 1, 4, 4, 1), Error);
}

// ---- the kernel seam -----------------------------------------------------

TEST(image_kernels, the_cpu_table_runs_these_kernels) {
  const KernelTable& k = kernels_for(Device::cpu());
  const Conv2dShape s = conv(2, 5, 11, 9, 6, 3, 3, 2, 2, 1, 1);
  const Vec x = randn(s.in_numel(), 71), w = randn(s.weight_numel(), 72);
  Vec a(s.out_numel()), b(s.out_numel());
  k.conv2d_forward(Stream::cpu(), a.data(), x.data(), w.data(), nullptr, s);
  cpu::conv2d_forward(b.data(), x.data(), w.data(), nullptr, s);
  EXPECT_EQ(a, b);
  const int64_t C = 5, HW = 99;
  const Vec bw = randn(C, 73), bb = randn(C, 74);
  Vec o1(x.size()), o2(x.size()), m1(C), m2(C), r1(C), r2(C);
  k.batchnorm_forward_training(Stream::cpu(), o1.data(), m1.data(), r1.data(), x.data(), bw.data(),
                               bb.data(), 2, C, HW, 1e-5f);
  cpu::batchnorm_forward_training(o2.data(), m2.data(), r2.data(), x.data(), bw.data(), bb.data(),
                                  2, C, HW, 1e-5f);
  EXPECT_EQ(o1, o2);
  EXPECT_EQ(r1, r2);
}

// Timings for the record (not a check): run with --gtest_also_run_disabled_tests.
TEST(image_kernels, DISABLED_timing) {
  // The best of 5 runs after a warm-up (the machine may be shared).
  auto time = [](auto&& f) {
    f();
    double best = 1e30;
    for (int r = 0; r < 5; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      f();
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return best;
  };
  for (cpu::ConvBackend backend : kOneDnnLayouts)
  for (const Conv2dShape& s : {conv(8, 64, 56, 56, 64, 3, 3, 1, 1, 1, 1),
                               conv(8, 3, 224, 224, 64, 7, 7, 2, 2, 3, 3),
                               conv(8, 256, 56, 56, 64, 1, 1, 1, 1, 0, 0)}) {
    ScopedConvBackend use(backend);
    const Vec x = randn(s.in_numel(), 1), w = randn(s.weight_numel(), 2),
              g = randn(s.out_numel(), 3);
    std::vector<uint16_t> xh, wh, gh;
    round_to(HalfFormat::BF16, x, &xh);
    round_to(HalfFormat::BF16, w, &wh);
    round_to(HalfFormat::BF16, g, &gh);
    Vec out(s.out_numel()), dx(s.in_numel()), dw(s.weight_numel());
    const double gflop = 2.0 * s.out_numel() * s.C * s.KH * s.KW / 1e9;
    const double f = time([&] { cpu::conv2d_forward(out.data(), x.data(), w.data(), nullptr, s); });
    const double d = time([&] { cpu::conv2d_backward_data(dx.data(), g.data(), w.data(), s); });
    const double wt = time([&] { cpu::conv2d_backward_weights(dw.data(), nullptr, g.data(), x.data(), s); });
    const double hf = time([&] { cpu::conv2d_forward_half(HalfFormat::BF16, out.data(), xh.data(), wh.data(), nullptr, s); });
    const double hd = time([&] { cpu::conv2d_backward_data_half(HalfFormat::BF16, dx.data(), gh.data(), wh.data(), s); });
    const double hw = time([&] { cpu::conv2d_backward_weights_half(HalfFormat::BF16, dw.data(), nullptr, gh.data(), xh.data(), s); });
    std::printf("%s, %s (%.2f GFLOP): f32 fwd %.1f bwd-data %.1f bwd-w %.1f GFLOP/s; bf16 fwd %.1f "
                "bwd-data %.1f bwd-w %.1f GFLOP/s\n  f32 %s\n  bf16 %s\n",
                name(backend), describe(s).c_str(), gflop, gflop / f, gflop / d, gflop / wt, gflop / hf,
                gflop / hd, gflop / hw,
                cpu::conv2d_path(cpu::ConvPass::Forward, cpu::ConvData::F32, s).c_str(),
                cpu::conv2d_path(cpu::ConvPass::Forward, cpu::ConvData::BF16, s).c_str());
    if (s.C == 64 && s.KH == 3 && backend == cpu::ConvBackend::OneDnnPlain) {
      ForceReferenceConv force;
      const double r = time([&] { cpu::conv2d_forward(out.data(), x.data(), w.data(), nullptr, s); });
      std::printf("  reference fwd %.2f GFLOP/s\n", gflop / r);
    }
  }
}
