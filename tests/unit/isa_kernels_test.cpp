// test-links: mt_kernels mt_comm
// Every dispatched kernel at every ISA level this CPU can run, against the
// same kernel at the scalar level (the reference): bitwise where the
// algorithm promises it (bf16/f16 rounding, elementwise sums, copies), within
// a stated tolerance where the vector width changes the order of a
// reduction. Levels the CPU lacks are reported as skipped, with the reason.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "meshtrain/comm/reduce.h"
#include "meshtrain/comm/stream_copy.h"
#include "meshtrain/core/cpu_isa.h"
#include "meshtrain/core/half.h"
#include "meshtrain/kernels/cpu/adamw.h"
#include "meshtrain/kernels/cpu/attention.h"
#include "meshtrain/kernels/cpu/attention_fused.h"
#include "meshtrain/kernels/cpu/elementwise.h"
#include "meshtrain/kernels/cpu/encoder.h"
#include "meshtrain/kernels/cpu/gelu.h"
#include "meshtrain/kernels/cpu/layernorm.h"
#include "meshtrain/kernels/cpu/rmsnorm.h"
#include "meshtrain/kernels/cpu/swiglu.h"
#include "meshtrain/kernels/cpu/matmul.h"
#include "meshtrain/kernels/cpu/reduce.h"
#include "meshtrain/kernels/cpu/softmax_cross_entropy.h"

using namespace meshtrain;
using namespace meshtrain::cpu;

namespace {

// Sizes with every kind of tail for 8- and 16-lane vectors.
const int64_t kSizes[] = {1, 7, 8, 15, 16, 17, 33, 100, 1027};

std::vector<float> randn(int64_t n, uint64_t seed, float scale = 1.f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}

// Relative max difference, with an absolute floor for values near zero
// (|want| + 1: a result near 0 carries the rounding of its ~unit-sized
// terms, not of itself). Each caller's rtol says why its value.
void expect_close(const std::vector<float>& want, const std::vector<float>& got, double rtol,
                  const char* what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_NEAR(got[i], want[i], rtol * (1.0 + std::fabs(want[i]))) << what << " at " << i;
}

void expect_bitwise(const void* want, const void* got, size_t bytes, const char* what) {
  ASSERT_EQ(std::memcmp(want, got, bytes), 0) << what << " differs from the scalar level";
}

// Runs fn at the scalar level (reference) and at `level`; fn fills its output.
template <typename Out>
std::pair<Out, Out> at_both(Isa level, const std::function<Out()>& fn) {
  Out ref, got;
  {
    ScopedIsaCap cap(Isa::Scalar);
    ref = fn();
  }
  {
    ScopedIsaCap cap(level);
    got = fn();
  }
  return {ref, got};
}

#define SKIP_UNLESS_CPU_HAS(level)                                                      \
  if (!cpu_supports(level))                                                           \
    GTEST_SKIP() << "this CPU (" << cpu_model_name() << ") supports up to "           \
                 << isa_name(cpu_isa()) << ", not " << isa_name(level);

// One test per (level, kernel family): ISA_TEST(name) { body using `level` }.
#define ISA_TEST(name)                                               \
  void name##_at(Isa level);                                         \
  TEST(isa_scalar, name) { name##_at(Isa::Scalar); }                 \
  TEST(isa_avx2, name) {                                             \
    SKIP_UNLESS_CPU_HAS(Isa::Avx2);                                  \
    name##_at(Isa::Avx2);                                            \
  }                                                                  \
  TEST(isa_avx512, name) {                                           \
    SKIP_UNLESS_CPU_HAS(Isa::Avx512);                                \
    name##_at(Isa::Avx512);                                          \
  }                                                                  \
  void name##_at(Isa level)

using Floats = std::vector<float>;

}  // namespace

TEST(isa, active_level_is_what_the_cpu_has_unless_capped) {
  EXPECT_TRUE(cpu_supports(active_isa()));
  {
    ScopedIsaCap cap(Isa::Scalar);
    EXPECT_EQ(active_isa(), Isa::Scalar);
    EXPECT_STREQ(attention_path(), "gemm");
    EXPECT_STREQ(half_conversion_isa(), "scalar");
  }
  EXPECT_EQ(parse_isa("avx2"), Isa::Avx2);
  EXPECT_THROW(parse_isa("sse9"), UsageError);
  if (cpu_isa() != Isa::Avx512Bf16) {
    EXPECT_THROW(ScopedIsaCap cap(Isa::Avx512Bf16), Error);
  }
}

// What `--version` and every run print as "cpu:", from /proc/cpuinfo as x86
// and aarch64 kernels write it (an aarch64 one has no "model name" line).
TEST(isa, cpu_name_from_x86_and_aarch64_cpuinfo) {
  EXPECT_EQ(cpu_model_name_from_cpuinfo("processor\t: 0\nvendor_id\t: AuthenticAMD\n"
                                        "model name\t: AMD EPYC 7763 64-Core Processor \nflags\t: fpu\n"),
            "AMD EPYC 7763 64-Core Processor");
  const std::string grace =
      "processor\t: 0\nBogoMIPS\t: 2000.00\nFeatures\t: fp asimd sve2 bf16\n"
      "CPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x0\nCPU part\t: 0xd4f\n"
      "CPU revision\t: 0\n\nprocessor\t: 1\nCPU implementer\t: 0x41\nCPU part\t: 0xd4f\n";
  EXPECT_EQ(cpu_model_name_from_cpuinfo(grace), "Arm Neoverse V2");
  EXPECT_EQ(cpu_model_name_from_cpuinfo("CPU implementer\t: 0x41\nCPU part\t: 0xd84\n"), "Arm Neoverse V3");
  EXPECT_EQ(cpu_model_name_from_cpuinfo("CPU implementer\t: 0x41\nCPU part\t: 0xd0c\n"), "Arm Neoverse N1");
  // Another vendor's core: the raw identifiers, not a guess.
  EXPECT_EQ(cpu_model_name_from_cpuinfo("CPU implementer\t: 0x61\nCPU part\t: 0x039\n"),
            "implementer 0x61 part 0x039");
  EXPECT_EQ(cpu_model_name_from_cpuinfo(""), "");
  EXPECT_EQ(cpu_model_name_from_cpuinfo("CPU implementer\t: 0x41\n"), "");
}

ISA_TEST(bf16_and_f16_conversions_are_bitwise_equal) {
  // Specials, subnormals, rounding ties and random values, at odd lengths.
  std::vector<float> specials = {0.f, -0.f, 1.f, -1.f, 65504.f, 65520.f, 1e-8f, -3e-39f,
                                 std::numeric_limits<float>::infinity(),
                                 -std::numeric_limits<float>::infinity(),
                                 std::numeric_limits<float>::quiet_NaN(),
                                 std::numeric_limits<float>::denorm_min(),
                                 bits_f32(0x3f808000u), bits_f32(0x3f818000u), bits_f32(0x7f800001u),
                                 bits_f32(0xffc12345u)};
  for (int64_t n : kSizes) {
    Floats x = randn(n, 7 + n, 100.f);
    for (size_t i = 0; i < x.size() && i < specials.size(); ++i) x[i * 3 % x.size()] = specials[i];
    using H = std::vector<uint16_t>;
    auto [rb, gb] = at_both<H>(level, [&] { H h(x.size()); f32_to_bf16(x.data(), h.data(), h.size()); return h; });
    expect_bitwise(rb.data(), gb.data(), rb.size() * 2, "f32 -> bf16");
    auto [rh, gh] = at_both<H>(level, [&] { H h(x.size()); f32_to_f16(x.data(), h.data(), h.size()); return h; });
    expect_bitwise(rh.data(), gh.data(), rh.size() * 2, "f32 -> f16");
    auto [rbf, gbf] = at_both<Floats>(level, [&] { Floats f(x.size()); bf16_to_f32(rb.data(), f.data(), f.size()); return f; });
    expect_bitwise(rbf.data(), gbf.data(), rbf.size() * 4, "bf16 -> f32");
    auto [rhf, ghf] = at_both<Floats>(level, [&] { Floats f(x.size()); f16_to_f32(rh.data(), f.data(), f.size()); return f; });
    expect_bitwise(rhf.data(), ghf.data(), rhf.size() * 4, "f16 -> f32");
  }
}

ISA_TEST(layernorm_matches_scalar) {
  for (int64_t C : {7, 16, 33, 384}) {
    const int64_t N = 37;
    const Floats x = randn(N * C, 1, 2.f), w = randn(C, 2), b = randn(C, 3), dy = randn(N * C, 4);
    auto run = [&] {
      Floats y(N * C), mean(N), rstd(N), dx(N * C, 0.5f), dw(C, 0.25f), db(C, 0.f);
      layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
      layernorm_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), mean.data(),
                         rstd.data(), N, C);
      Floats all = y;
      for (auto* v : {&mean, &rstd, &dx, &dw, &db}) all.insert(all.end(), v->begin(), v->end());
      return all;
    };
    auto [ref, got] = at_both<Floats>(level, run);
    // Row sums over C <= 384 (mean, variance, the backward's two) and column
    // sums over N = 37 in the vector width's order: worst case C 2^-24 =
    // 2.3e-5 of the terms' size. Measured 1.6e-6 (avx2), 1.4e-6 (avx512): 5%.
    expect_close(ref, got, 2e-5, "layernorm forward/backward");
  }
}

ISA_TEST(rmsnorm_matches_scalar) {
  for (int64_t C : {7, 16, 33, 384}) {
    const int64_t N = 37;
    const Floats x = randn(N * C, 12, 2.f), w = randn(C, 13), dy = randn(N * C, 14);
    auto [ref, got] = at_both<Floats>(level, [&] {
      Floats y(N * C), rstd(N), dx(N * C, 0.5f), dw(C, 0.25f);
      rmsnorm_forward(y.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5f);
      rmsnorm_backward(dx.data(), dw.data(), dy.data(), x.data(), w.data(), rstd.data(), N, C);
      for (auto* v : {&rstd, &dx, &dw}) y.insert(y.end(), v->begin(), v->end());
      return y;
    });
    // As layernorm: sums over C <= 384 reassociated, C 2^-24 = 2.3e-5.
    // Measured 1.6e-6 (avx2), 2.6e-6 (avx512): 8% of the bound.
    expect_close(ref, got, 2e-5, "rmsnorm forward/backward");
  }
}

ISA_TEST(swiglu_matches_scalar) {
  for (int64_t H : {5, 16, 129}) {
    const int64_t N = 11;
    const Floats gu = randn(N * 2 * H, 15, 3.f), dy = randn(N * H, 16);
    auto [ref, got] = at_both<Floats>(level, [&] {
      Floats y(N * H), dgu(N * 2 * H);
      swiglu_forward(y.data(), gu.data(), N, H);
      swiglu_backward(dgu.data(), dy.data(), gu.data(), N, H);
      y.insert(y.end(), dgu.begin(), dgu.end());
      return y;
    });
    // Elementwise (no reduction): the vector exp and FMA contraction round
    // differently, a few ulp; 1e-6 = 17 x 2^-24. Measured 1.9e-6 at
    // |y| = 11.6 (2.5 ulp relative), 15% of the bound.
    expect_close(ref, got, 1e-6, "swiglu forward/backward");
  }
}

ISA_TEST(gelu_matches_scalar) {
  for (int64_t n : kSizes) {
    const Floats x = randn(n, 5, 3.f), dy = randn(n, 6);
    auto [ref, got] = at_both<Floats>(level, [&] {
      Floats y(n), dx(n);
      gelu_forward(y.data(), x.data(), n);
      gelu_backward(dx.data(), x.data(), dy.data(), n);
      y.insert(y.end(), dx.begin(), dx.end());
      return y;
    });
    // Elementwise, but s = 1/(exp(2u) + 1) is evaluated with another exp and
    // FMA contraction, a couple of 2^-24 apart; where s -> 1 the 1 - s in
    // GELU = x (1 - s) and GELU' = (1 - s)(1 + x s 2u') turns that into
    // |x| and |dy x 2u'| (~10 at x = -2) times 2^-24 absolute, ~1e-6.
    // Measured 8.5e-7 (GELU' at x = -1.88, dy = 2.26), 69% of the bound at
    // avx2 and avx512: tight, and exact for these fixed inputs.
    expect_close(ref, got, 1e-6, "gelu");
  }
}

// At each level: saturation is exact (GELU = x far right, 0 far left, with
// GELU' 1 and 0 there), infinities and NaN behave, and the derivative stays 1
// for large x instead of growing with x^3 (the tanh clamp used to leave it
// 0.3% high at x = 100).
ISA_TEST(gelu_saturates_exactly_and_keeps_nan) {
  ScopedIsaCap cap(level);
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = INFINITY;
  // Nine of each so the vector loops see them too, not only the scalar tail.
  const Floats probes = {20.f, 100.f, 1e4f, 1e9f, -20.f, -100.f, -1e9f, inf, nan};
  Floats x;
  for (float p : probes) x.insert(x.end(), 9, p);
  const int64_t n = static_cast<int64_t>(x.size());
  Floats y(n), dx(n), ones(n, 1.f);
  gelu_forward(y.data(), x.data(), n);
  gelu_backward(dx.data(), x.data(), ones.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    SCOPED_TRACE(::testing::Message() << "x = " << v << " at " << i);
    if (std::isnan(v)) {
      EXPECT_TRUE(std::isnan(y[i]));
      EXPECT_TRUE(std::isnan(dx[i]));
    } else if (v > 0) {
      EXPECT_EQ(y[i], v);
      EXPECT_EQ(dx[i], v == inf ? inf : 1.f);
    } else {
      EXPECT_EQ(y[i], 0.f);
      EXPECT_EQ(dx[i], 0.f);
    }
  }
}

ISA_TEST(adamw_matches_scalar) {
  for (int64_t n : {int64_t{17}, int64_t{40000}}) {
    const Floats g = randn(n, 8), p0 = randn(n, 9), m0 = randn(n, 10, 0.1f);
    Floats v0 = randn(n, 11, 0.1f);
    for (auto& v : v0) v = v * v;
    AdamWHyper h;
    h.lr = 1e-2f, h.weight_decay = 0.1f, h.step = 3, h.grad_scale = 0.5f;
    auto [ref, got] = at_both<Floats>(level, [&] {
      Floats p = p0, m = m0, v = v0;
      adamw_step(p.data(), g.data(), m.data(), v.data(), n, h);
      p.insert(p.end(), m.begin(), m.end());
      p.insert(p.end(), v.begin(), v.end());
      return p;
    });
    // Elementwise: sqrt, division and FMA contraction round differently per
    // level, a few ulp; 1e-6 = 17 x 2^-24 of (1 + |value|). Measured 2.4e-7
    // (1 ulp of p = -2.08), 8% of the bound.
    expect_close(ref, got, 1e-6, "adamw");
  }
}

ISA_TEST(encoder_matches_scalar) {
  const int64_t B = 2, T = 5, C = 33, V = 11;
  const Floats wte = randn(V * C, 12), wpe = randn(T * C, 13), dy = randn(B * T * C, 14);
  std::vector<int32_t> tok = {1, 3, 3, 10, 0, 7, 7, 7, 2, 9};
  auto [ref, got] = at_both<Floats>(level, [&] {
    Floats y(B * T * C), dwte(V * C, 0.f), dwpe(T * C, 0.f);
    encoder_forward(y.data(), tok.data(), wte.data(), wpe.data(), B, T, C);
    encoder_backward(dwte.data(), dwpe.data(), dy.data(), tok.data(), B, T, C);
    y.insert(y.end(), dwte.begin(), dwte.end());
    y.insert(y.end(), dwpe.begin(), dwpe.end());
    return y;
  });
  expect_bitwise(ref.data(), got.data(), ref.size() * 4, "encoder (sums in the same order)");
}

ISA_TEST(softmax_cross_entropy_matches_scalar) {
  const int64_t N = 9, V = 61, Vp = 64;
  const Floats logits = randn(N * Vp, 15, 4.f);
  std::vector<int32_t> t = {0, 5, 60, -1, 17, 33, 2, 59, 8};
  auto [ref, got] = at_both<Floats>(level, [&] {
    Floats losses(N), x = logits;
    const int64_t counted = softmax_cross_entropy_forward(losses.data(), x.data(), t.data(), N, V, Vp);
    EXPECT_EQ(counted, N - 1);
    softmax_cross_entropy_backward(x.data(), t.data(), 0.125f, N, V, Vp);
    losses.insert(losses.end(), x.begin(), x.end());
    return losses;
  });
  // Max and sum of exp over V = 61 logits in the lanes' order: worst case
  // 61 2^-24 = 3.6e-6 of the sum, which the log turns into absolute error on
  // the loss; the gradients p/8 are within it. Measured 7.5e-9 (0.3%): the
  // bound is the reassociation worst case, not a fit.
  expect_close(ref, got, 2e-6, "softmax cross-entropy");
}

ISA_TEST(elementwise_and_reductions_match_scalar) {
  for (int64_t n : kSizes) {
    const Floats a = randn(n, 16), b = randn(n, 17);
    auto [ref, got] = at_both<Floats>(level, [&] {
      Floats out(n), acc = a, sc = b;
      add(out.data(), a.data(), b.data(), n);
      add_inplace(acc.data(), b.data(), n);
      scale_inplace(sc.data(), 0.37f, n);
      out.insert(out.end(), acc.begin(), acc.end());
      out.insert(out.end(), sc.begin(), sc.end());
      return out;
    });
    expect_bitwise(ref.data(), got.data(), ref.size() * 4, "add / add_inplace / scale");
    auto [rs, gs] = at_both<Floats>(level, [&] { return Floats{static_cast<float>(sum_squares(a.data(), n))}; });
    // n <= 1027 squares in 4 (the scalar build's SSE), 8 or 16 f32 lanes:
    // the rounding random-walks to ~2^-24 sqrt(n/4) = 1e-6 of the sum.
    // Measured 1.6e-7 relative (n = 1027), 16% of the bound.
    expect_close(rs, gs, 1e-6, "sum_squares");
    Floats bad = a;
    bad[n / 2] = std::numeric_limits<float>::quiet_NaN();
    ScopedIsaCap cap(level);
    EXPECT_TRUE(all_finite(a.data(), n));
    EXPECT_FALSE(all_finite(bad.data(), n));
  }
}

ISA_TEST(attention_matches_scalar_gemm_path) {
  struct Shape { int64_t B, T, C, NH; };
  for (const Shape s : {Shape{2, 70, 12, 3}, Shape{1, 33, 32, 2}, Shape{1, 1, 8, 2}, Shape{2, 130, 128, 2}}) {
    const int64_t hd = s.C / s.NH;
    const Floats qkv = randn(s.B * s.T * 3 * s.C, 18), dout = randn(s.B * s.T * s.C, 19);
    Floats ws(2 * attention_workspace_floats(s.T, hd));
    auto [ref, got] = at_both<Floats>(level, [&] {
      Floats out(s.B * s.T * s.C), lse(s.B * s.NH * s.T), dqkv(qkv.size());
      attention_forward(out.data(), lse.data(), qkv.data(), s.B, s.T, s.C, s.NH, ws.data(), 2);
      attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), s.B, s.T, s.C,
                         s.NH, ws.data(), 2);
      out.insert(out.end(), lse.begin(), lse.end());
      out.insert(out.end(), dqkv.begin(), dqkv.end());
      return out;
    });
    SCOPED_TRACE(::testing::Message() << "T " << s.T << " C " << s.C << " NH " << s.NH);
    // Sums over up to T = 130 keys or rows, and hd <= 64 channels, in the
    // vector width's order: worst case T 2^-24 = 7.7e-6 times the terms'
    // size (|v|, |dout| up to ~3). Measured 7.1e-7, 3.6% of the bound.
    expect_close(ref, got, 2e-5, "attention");
  }
}

ISA_TEST(collective_reductions_match_scalar) {
  for (int64_t n64 : kSizes) {
    const size_t n = static_cast<size_t>(n64);
    const Floats a = randn(n64, 20), b = randn(n64, 21), c = randn(n64, 22);
    for (comm::ReduceOp op : {comm::ReduceOp::Sum, comm::ReduceOp::Max, comm::ReduceOp::Min, comm::ReduceOp::Product}) {
      auto [ref, got] = at_both<Floats>(level, [&] {
        Floats dst = a, many(n);
        comm::reduce_into(dst.data(), b.data(), n, DType::F32, op);
        const void* srcs[3] = {a.data(), b.data(), c.data()};
        comm::reduce_many(many.data(), srcs, 3, n, DType::F32, op);
        dst.insert(dst.end(), many.begin(), many.end());
        return dst;
      });
      expect_bitwise(ref.data(), got.data(), ref.size() * 4, "f32 reduce_into / reduce_many");
    }
    using H = std::vector<uint16_t>;
    H ha(n), hb(n);
    f32_to_bf16(a.data(), ha.data(), n);
    f32_to_bf16(b.data(), hb.data(), n);
    for (DType dt : {DType::BF16, DType::F16}) {
      auto [ref, got] = at_both<H>(level, [&] {
        H dst = ha;
        comm::reduce_into(dst.data(), hb.data(), n, dt, comm::ReduceOp::Sum);
        comm::scale_avg(dst.data(), n, dt, 3);
        return dst;
      });
      expect_bitwise(ref.data(), got.data(), ref.size() * 2, "16-bit reduce_into + scale_avg");
    }
  }
}

ISA_TEST(streaming_copy_is_a_copy) {
  for (size_t bytes : {size_t{1}, size_t{63}, size_t{64}, size_t{1000}, size_t{1} << 16}) {
    std::vector<unsigned char> src(bytes + 64), dst(bytes + 64, 0);
    for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>(i * 31 + 7);
    ScopedIsaCap cap(level);
    for (size_t off : {size_t{0}, size_t{3}}) {
      std::fill(dst.begin(), dst.end(), 0);
      comm::stream_copy(dst.data() + off, src.data() + 1, bytes);
      comm::stream_fence();
      ASSERT_EQ(std::memcmp(dst.data() + off, src.data() + 1, bytes), 0) << bytes << " bytes";
      ASSERT_EQ(dst[off + bytes], 0) << "wrote past the end";
    }
  }
}

ISA_TEST(gemm_glue_matches_scalar) {
  // Bias seeding before a beta=1 GEMM and the bias gradient's column sums:
  // each column is summed over the rows in order at every level (bitwise).
  for (int64_t OC : {1, 15, 64, 65, 130}) {
    const int64_t N = 19;
    const Floats m = randn(N * OC, 23), bias = randn(OC, 24), base = randn(N * OC, 25);
    auto [ref, got] = at_both<Floats>(level, [&] {
      Floats seeded(N * OC), acc = base, sums = randn(OC, 26);
      EXPECT_EQ(seed_output_with_bias(seeded.data(), bias.data(), N, OC, false), 1.0f);
      seed_output_with_bias(acc.data(), bias.data(), N, OC, true);
      add_column_sums(sums.data(), m.data(), N, OC);
      seeded.insert(seeded.end(), acc.begin(), acc.end());
      seeded.insert(seeded.end(), sums.begin(), sums.end());
      return seeded;
    });
    expect_bitwise(ref.data(), got.data(), ref.size() * 4, "bias seeding / column sums");
  }
}
