// test-links: mt_nn
// Mixed-precision GPT: bf16 and fp16 forward/backward track fp32 on the same
// weights, recomputation stays bit-identical under mixed precision, the
// parameter-hook contract holds, the 16-bit compute copy follows updates of
// the f32 master weights, and the activation prediction equals the allocator.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "meshtrain/core/memory.h"
#include "meshtrain/core/rng.h"
#include "meshtrain/nn/gpt.h"
#include "gpt_test_models.h"

using namespace meshtrain;
using namespace meshtrain::testing;

namespace {

struct Result {
  float loss;
  std::vector<float> grads;
};

Result run(const GPTConfig& cfg, Precision p, const Recompute& rc = {}, float loss_scale = 1.0f) {
  GPT m(cfg);
  m.init_weights(7);
  m.set_precision(p);
  m.set_recompute(rc);
  const int B = 3, T = 13;
  auto in = random_tokens(B * T, cfg.vocab_size, 1), tg = random_tokens(B * T, cfg.vocab_size, 2);
  Result r;
  r.loss = m.forward(in.data(), tg.data(), B, T);
  m.backward(loss_scale);
  const float* g = m.grads().flat.data<float>();
  r.grads.assign(g, g + m.grads().flat.numel());
  return r;
}

double cosine(const std::vector<float>& a, const std::vector<float>& b) {
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    ab += double(a[i]) * b[i];
    aa += double(a[i]) * a[i];
    bb += double(b[i]) * b[i];
  }
  return ab / std::sqrt(aa * bb);
}

double rel_norm_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, n = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    d += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    n += double(b[i]) * b[i];
  }
  return std::sqrt(d / n);
}

}  // namespace

// bf16 keeps 8 significant bits (unit roundoff u = 2^-8), fp16 11 (2^-11),
// and every GEMM rounds both operands: a product is up to 2u off.
// Loss: each logit (|z| <~ 1 at init) is up to ~2u |z| off and the loss moves
// by at most ~2 max|dz|: 4u / loss = 4e-3 (bf16), 5e-4 (fp16) relative; the
// bounds 1e-2 and 2e-3 are 2.5x and 4x that. Measured 1.6e-5 and 3.3e-7: the
// roundings average out over 39 positions.
// Gradients: an element passes through ~3L + 2 = 11 GEMMs, each adding up
// to 2u: in quadrature 2u sqrt(11) = 2.6e-2 (bf16), 3.2e-3 (fp16) relative;
// the L2 bounds 5e-2 and 1e-2 are 2x and 3x that. Measured 2.6e-3 and
// 3.2e-4 (about u / 1.5). The cosines follow: 1 - cos ~ (L2 error)^2 / 2,
// measured 3e-6 (bf16) and < 1e-7 (fp16). The same at every ISA level.
TEST(precision, mixed_precision_forward_backward_tracks_fp32) {
  const GPTConfig cfg = odd_gpt_shape();
  const Result f32 = run(cfg, Precision::FP32);
  const Result bf = run(cfg, Precision::BF16);
  const Result hf = run(cfg, Precision::FP16);
  EXPECT_NEAR(bf.loss, f32.loss, 1e-2 * f32.loss);
  EXPECT_NEAR(hf.loss, f32.loss, 2e-3 * f32.loss);
  EXPECT_NE(bf.loss, f32.loss);  // really computed differently
  EXPECT_LT(rel_norm_diff(bf.grads, f32.grads), 5e-2);
  EXPECT_LT(rel_norm_diff(hf.grads, f32.grads), 1e-2);
  EXPECT_GT(cosine(bf.grads, f32.grads), 0.998);
  EXPECT_GT(cosine(hf.grads, f32.grads), 0.9999);
  // fp16 with a loss scale: gradients are scale x larger, and unscale to the same.
  const Result hs = run(cfg, Precision::FP16, {}, 1024.0f);
  std::vector<float> unscaled(hs.grads.size());
  for (size_t i = 0; i < hs.grads.size(); ++i) unscaled[i] = hs.grads[i] / 1024.0f;
  // x 1024 is exact, but it changes which tiny fp16 values underflow: two
  // fp16 runs, each within the fp16 bound above of f32. Measured 3.2e-5.
  EXPECT_LT(rel_norm_diff(unscaled, hf.grads), 1e-2);
}

// The model through the widening fallback (what a CPU without AVX512_BF16
// runs) matches the oneDNN path: both multiply the same bf16 values exactly
// and accumulate in f32; only the summation order differs.
// That alone is ~1e-7 relative; an f32 difference can also flip the bf16
// rounding of a next layer's input element, a 2^-8 = 3.9e-3 jump of it. The
// loss and the gradient L2 (was 1e-2) are held to 1e-4, 1/40 of every
// element flipping. Measured: equal losses, gradients 9.8e-8 apart
// (avx512bf16, the one level with both paths).
TEST(precision, bf16_fallback_path_matches_the_onednn_path) {
  if (!cpu::have_onednn() || !cpu::cpu_has_avx512_bf16()) GTEST_SKIP() << "no oneDNN bf16 path here";
  const GPTConfig cfg = odd_gpt_shape();
  cpu::set_bf16_gemm_path(cpu::HalfGemmPath::FallbackSgemm);
  const Result fb = run(cfg, Precision::BF16);
  cpu::set_bf16_gemm_path(cpu::HalfGemmPath::OneDnnBf16);
  const Result dn = run(cfg, Precision::BF16);
  EXPECT_NEAR(fb.loss, dn.loss, 1e-4 * dn.loss);
  EXPECT_LT(rel_norm_diff(fb.grads, dn.grads), 1e-4);
  EXPECT_GT(cosine(fb.grads, dn.grads), 0.9999);
}

TEST(precision, recompute_is_bit_identical_under_mixed_precision) {
  const GPTConfig cfg = odd_gpt_shape();
  for (Precision p : {Precision::BF16, Precision::FP16}) {
    const Result none = run(cfg, p);
    for (const Recompute& rc : {Recompute::full(), Recompute::every_k(2), Recompute::selective()}) {
      const Result r = run(cfg, p, rc);
      EXPECT_EQ(r.loss, none.loss) << precision_name(p) << " " << rc.name();
      ASSERT_EQ(r.grads, none.grads) << precision_name(p) << " " << rc.name();
    }
  }
}

// An fp16 overflow: a huge loss scale turns the rounded output gradients into
// inf, which must reach the f32 gradient buffer (the loss scaler's signal).
TEST(precision, fp16_overflow_reaches_the_gradients) {
  const Result r = run(odd_gpt_shape(), Precision::FP16, {}, 1e9f);
  bool nonfinite = false;
  for (float g : r.grads) nonfinite |= !std::isfinite(g);
  EXPECT_TRUE(nonfinite);
  const Result b = run(odd_gpt_shape(), Precision::BF16, {}, 1e9f);  // bf16 has f32's range
  for (float g : b.grads) ASSERT_TRUE(std::isfinite(g));
}

// Two bf16 models of the same shape with different weights (seeds 1 and 2).
static void different_bf16_pair(GPT& a, GPT& b) {
  a.init_weights(1);
  b.init_weights(2);
  a.set_precision(Precision::BF16);
  b.set_precision(Precision::BF16);
}

// What the optimizer does to the f32 masters, here: `to` takes `from`'s.
static void copy_masters(const GPT& from, GPT& to, const GPTConfig& cfg) {
  std::copy(from.params().flat.data<float>(), from.params().flat.data<float>() + cfg.num_params(),
            to.params().flat.data<float>());
}

// The 16-bit copy is refreshed from params() at each forward: an update of the
// f32 master weights (what the optimizer does) is seen by the next forward.
TEST(precision, compute_copy_follows_the_master_weights) {
  const GPTConfig cfg = odd_gpt_shape();
  GPT a(cfg), b(cfg);
  different_bf16_pair(a, b);
  const int B = 2, T = 9;
  auto in = random_tokens(B * T, cfg.vocab_size, 3), tg = random_tokens(B * T, cfg.vocab_size, 4);
  const float la = a.forward(in.data(), tg.data(), B, T);
  const float lb = b.forward(in.data(), tg.data(), B, T);
  ASSERT_NE(la, lb);
  // Copy b's f32 weights into a: a's next forward must give b's loss exactly.
  copy_masters(b, a, cfg);
  EXPECT_EQ(a.forward(in.data(), tg.data(), B, T), lb);
}

TEST(precision, a_held_copy_is_rounded_once_and_follows_again_when_let_go) {
  // Model::hold_parameters: a step's micro-batches reuse the copy the first
  // one rounded; once let go, the next forward rounds the masters again.
  const GPTConfig cfg = odd_gpt_shape();
  GPT a(cfg), b(cfg);
  different_bf16_pair(a, b);
  const int B = 2, T = 9;
  auto in = random_tokens(B * T, cfg.vocab_size, 3), tg = random_tokens(B * T, cfg.vocab_size, 4);
  const float lb = b.forward(in.data(), tg.data(), B, T);
  a.hold_parameters(true);
  const float la = a.forward(in.data(), tg.data(), B, T);
  ASSERT_NE(la, lb);
  copy_masters(b, a, cfg);
  // Held: the matrices are still a's rounded ones, so the loss is not b's.
  const float held = a.forward(in.data(), tg.data(), B, T);
  EXPECT_NE(held, lb);
  a.hold_parameters(false);
  EXPECT_EQ(a.forward(in.data(), tg.data(), B, T), lb);
}

TEST(precision, param_hook_order_is_unchanged_and_weights_are_read_inside_need) {
  const GPTConfig cfg = odd_gpt_shape();
  std::vector<std::string> log32, log16;
  for (Precision p : {Precision::FP32, Precision::BF16}) {
    GPT m(cfg);
    m.init_weights(5);
    m.set_precision(p);
    auto& log = p == Precision::FP32 ? log32 : log16;
    m.set_param_hook([&](GPT::ParamEvent e, int unit, bool bwd) {
      const char c = e == GPT::ParamEvent::Need ? 'N' : e == GPT::ParamEvent::Done ? 'D'
                   : e == GPT::ParamEvent::GradBegin ? 'B' : 'E';
      log.push_back(fmt::format("{}{}{}", c, unit, bwd ? 'b' : 'f'));
    });
    auto in = random_tokens(2 * 8, cfg.vocab_size, 1), tg = random_tokens(2 * 8, cfg.vocab_size, 2);
    m.forward(in.data(), tg.data(), 2, 8);
    m.backward();
  }
  EXPECT_EQ(log16, log32);
}

TEST(precision, activation_bytes_match_the_allocator_and_shrink) {
  const GPTConfig cfg = odd_gpt_shape();
  const int B = 4, T = 16;
  for (Precision p : {Precision::FP32, Precision::BF16, Precision::FP16}) {
    for (const Recompute& rc : {Recompute::none(), Recompute::full(), Recompute::selective()}) {
      const int64_t before = mem_stats().current[static_cast<size_t>(MemCategory::Activations)];
      {
        GPT m(cfg);
        m.init_weights(1);
        m.set_precision(p);
        m.set_recompute(rc);
        auto in = random_tokens(B * T, cfg.vocab_size, 1);
        m.forward(in.data(), in.data(), B, T);
        const int64_t now = mem_stats().current[static_cast<size_t>(MemCategory::Activations)];
        EXPECT_EQ(now - before, GPT::activation_bytes(cfg, B, T, rc, p))
            << precision_name(p) << " " << rc.name();
      }
    }
  }
  const int64_t f32 = GPT::activation_bytes(cfg, B, T, {}, Precision::FP32);
  const int64_t b16 = GPT::activation_bytes(cfg, B, T, {}, Precision::BF16);
  EXPECT_LT(b16, f32);
  // Parameters: the 16-bit compute copy adds 2 bytes per parameter.
  const int64_t p0 = mem_stats().current[static_cast<size_t>(MemCategory::Parameters)];
  GPT m(cfg);
  m.set_precision(Precision::BF16);
  EXPECT_EQ(mem_stats().current[static_cast<size_t>(MemCategory::Parameters)] - p0,
            6 * cfg.num_params());
}
