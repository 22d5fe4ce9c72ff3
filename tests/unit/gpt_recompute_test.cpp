// test-links: mt_nn
// Activation checkpointing: every recompute policy gives the same floats as
// keeping everything, keeps the parameter-hook contract, and really allocates
// less (the prediction equals the allocator's own activation counter).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "gradcheck.h"
#include "meshtrain/core/memory.h"
#include "meshtrain/core/rng.h"
#include "meshtrain/core/threads.h"
#include "meshtrain/nn/gpt.h"
#include "gpt_test_models.h"

using namespace meshtrain;
using namespace meshtrain::testing;

namespace {

GPTConfig six_layers() {
  GPTConfig c = gpt_preset("tiny");
  c.n_layer = 6;
  c.validate();
  return c;
}

std::vector<Recompute> recompute_modes() {
  return {Recompute::full(), Recompute::every_k(2), Recompute::every_k(3),
          Recompute::selective()};
}

using HookLog = std::vector<std::tuple<char, int, bool>>;

struct RunResult {
  std::vector<float> losses;
  std::vector<float> grads;
  HookLog hook_log;
  std::vector<std::pair<int64_t, int64_t>> ready;  // grad-ready hook ranges
};

// Two forward/backward pairs accumulating into the gradients (loss scale 1/2
// each), like grad_accum = 2. With `poison`, the parameter hook plays ZeRO-3:
// a unit's parameters are NaN outside its Need/Done, so any use outside the
// bracket (e.g. a recompute in the wrong place) poisons the results.
RunResult run(const GPTConfig& cfg, const Recompute& rc, int B, int T, bool poison) {
  GPT m(cfg);
  m.init_weights(21);
  perturb_biases_and_gains(m, 22);
  m.set_recompute(rc);
  RunResult r;
  const GPTParams& p = m.params();
  std::vector<std::vector<float>> saved(p.num_units());
  std::vector<int> held(p.num_units(), 0);
  float* flat = m.params().flat.data<float>();
  auto hide = [&](int u) {
    auto [b, e] = p.unit_range(u);
    saved[u].assign(flat + b, flat + e);
    std::fill(flat + b, flat + e, std::numeric_limits<float>::quiet_NaN());
  };
  if (poison) {
    for (int u = 0; u < p.num_units(); ++u) hide(u);
    m.set_param_hook([&](GPT::ParamEvent ev, int u, bool bwd) {
      // GradBegin/GradEnd bracket a gradient write that reads no parameters:
      // the unit stays hidden (NaN) through it.
      const bool grad = ev == GPT::ParamEvent::GradBegin || ev == GPT::ParamEvent::GradEnd;
      r.hook_log.emplace_back(ev == GPT::ParamEvent::Need ? 'N' : grad ? 'G' : 'D', u, bwd);
      if (grad) return;
      auto [b, e] = p.unit_range(u);
      if (ev == GPT::ParamEvent::Need) {
        if (held[u]++ == 0) std::copy(saved[u].begin(), saved[u].end(), flat + b);
      } else {
        ASSERT_GT(held[u], 0) << "Done without Need for unit " << u;
        if (--held[u] == 0) hide(u);
      }
    });
  }
  m.set_grad_ready_hook([&](int64_t b, int64_t e) { r.ready.emplace_back(b, e); });
  const int V = cfg.vocab_size;
  auto in = random_tokens(2 * B * T, V, 5), tg = random_tokens(2 * B * T, V, 6);
  tg[3] = -1;  // an ignored target
  m.zero_grad();
  for (int micro = 0; micro < 2; ++micro) {
    const int64_t off = static_cast<int64_t>(micro) * B * T;
    r.losses.push_back(m.forward(in.data() + off, tg.data() + off, B, T));
    m.backward(0.5f);
  }
  const float* g = m.grads().flat.data<float>();
  r.grads.assign(g, g + cfg.num_params());
  return r;
}

void expect_bit_identical(const GPTConfig& cfg, int B, int T, bool poison) {
  const RunResult base = run(cfg, Recompute::none(), B, T, poison);
  for (float l : base.losses) ASSERT_TRUE(std::isfinite(l));
  // A parameter read outside its bracket (poison) would leave NaN gradients.
  for (float g : base.grads) ASSERT_TRUE(std::isfinite(g));
  for (const Recompute& rc : recompute_modes()) {
    SCOPED_TRACE("recompute = " + rc.name());
    const RunResult r = run(cfg, rc, B, T, poison);
    ASSERT_EQ(r.losses.size(), base.losses.size());
    EXPECT_EQ(0, std::memcmp(r.losses.data(), base.losses.data(), 4 * base.losses.size()))
        << r.losses[0] << " vs " << base.losses[0];
    ASSERT_EQ(r.grads.size(), base.grads.size());
    int64_t differing = 0, first = -1;
    for (size_t i = 0; i < r.grads.size(); ++i)
      if (std::memcmp(&r.grads[i], &base.grads[i], 4) != 0 && differing++ == 0) first = i;
    EXPECT_EQ(differing, 0) << "first differing gradient at " << first;
    // Same parameter-hook sequence and grad-ready order as without recompute.
    EXPECT_EQ(r.hook_log, base.hook_log);
    EXPECT_EQ(r.ready, base.ready);
  }
}

int64_t activation_counter() {
  return mem_stats().current[static_cast<size_t>(MemCategory::Activations)];
}

// Activation bytes the allocator counts for one model after a forward.
int64_t measured_activation_bytes(const GPTConfig& cfg, const Recompute& rc, int B, int T) {
  const int64_t before = activation_counter();
  GPT m(cfg);
  m.init_weights(1);
  m.set_recompute(rc);
  auto in = random_tokens(B * T, cfg.vocab_size, 1);
  m.forward(in.data(), in.data(), B, T);
  m.backward();
  return activation_counter() - before;
}

}  // namespace

TEST(gpt_recompute, gradients_and_losses_bit_identical_on_tiny) {
  expect_bit_identical(gpt_preset("tiny"), 2, 16, /*poison=*/false);
}

TEST(gpt_recompute, gradients_and_losses_bit_identical_on_odd_shape) {
  expect_bit_identical(odd_gpt_shape(), 3, 7, /*poison=*/false);
}

// Threaded kernels (attention rows, OpenBLAS, LayerNorm) split work the same
// way in the recompute as in the forward, so threads change nothing.
TEST(gpt_recompute, gradients_bit_identical_with_several_threads) {
  const int before = thread_count();
  set_thread_count(3);
  expect_bit_identical(six_layers(), 2, 16, /*poison=*/false);
  expect_bit_identical(odd_gpt_shape(), 3, 7, /*poison=*/false);
  set_thread_count(before);
}

// Parameters exist only between Need and Done (as under ZeRO-3): recomputing
// outside the layer's backward bracket would read NaNs.
TEST(gpt_recompute, recompute_stays_inside_the_param_hook_brackets) {
  expect_bit_identical(odd_gpt_shape(), 3, 7, /*poison=*/true);
  expect_bit_identical(six_layers(), 2, 9, /*poison=*/true);
}

TEST(gpt_recompute, hook_order_is_the_documented_one_under_full_recompute) {
  const GPTConfig cfg = odd_gpt_shape();
  const int L = cfg.n_layer;
  const RunResult r = run(cfg, Recompute::full(), 2, 5, /*poison=*/true);
  HookLog want;
  for (int micro = 0; micro < 2; ++micro) {
    want.emplace_back('N', 0, false);
    want.emplace_back('D', 0, false);
    for (int l = 1; l <= L; ++l) {
      want.emplace_back('N', l, false);
      want.emplace_back('D', l, false);
    }
    for (auto e : HookLog{{'N', L + 1, false}, {'N', 0, false}, {'D', 0, false},
                          {'D', L + 1, false}, {'N', 0, true}, {'N', L + 1, true},
                          {'D', 0, true}, {'G', 0, true}, {'G', 0, true},
                          {'D', L + 1, true}})
      want.push_back(e);
    for (int l = L; l >= 1; --l) {
      want.emplace_back('N', l, true);
      want.emplace_back('D', l, true);
    }
  }
  EXPECT_EQ(r.hook_log, want);
}

TEST(gpt_recompute, predicted_activation_bytes_equal_the_allocator_counter) {
  for (const GPTConfig& cfg : {gpt_preset("tiny"), odd_gpt_shape(), six_layers()}) {
    for (auto [B, T] : {std::pair{2, 16}, std::pair{3, 7}}) {
      std::vector<Recompute> modes = recompute_modes();
      modes.push_back(Recompute::none());
      for (const Recompute& rc : modes) {
        SCOPED_TRACE(cfg.describe() + " B=" + std::to_string(B) + " T=" + std::to_string(T) +
                     " recompute=" + rc.name());
        EXPECT_EQ(measured_activation_bytes(cfg, rc, B, T),
                  GPT::activation_bytes(cfg, B, T, rc));
      }
    }
  }
}

TEST(gpt_recompute, activation_bytes_shrink_as_documented) {
  const GPTConfig cfg = six_layers();
  const int B = 2, T = 16;  // B*T and C multiples of 16: no alignment padding
  auto bytes = [&](const Recompute& rc) { return measured_activation_bytes(cfg, rc, B, T); };
  const int64_t none = bytes(Recompute::none()), every3 = bytes(Recompute::every_k(3)),
                every2 = bytes(Recompute::every_k(2)), full = bytes(Recompute::full()),
                selective = bytes(Recompute::selective());
  EXPECT_GT(none, every3);
  EXPECT_GT(every3, every2);
  EXPECT_GT(every2, full);
  EXPECT_LT(selective, none);
  EXPECT_EQ(bytes(Recompute::every_k(1)), full);
  // docs/ARCHITECTURE.md: a block's activations besides its output are
  // 15 BTC + 4 BT + NH*BT floats; selective drops BTC + NH*BT of them. Each
  // mode keeps one block's worth (or one attention core's) as scratch.
  const int64_t L = cfg.n_layer, C = cfg.n_embd, NH = cfg.n_head, BT = B * T;
  const int64_t block = 4 * (15 * BT * C + 4 * BT + NH * BT);
  const int64_t core = 4 * (BT * C + NH * BT);
  EXPECT_EQ(none - full, (L - 1) * block);
  EXPECT_EQ(none - every2, (L / 2 - 1) * block);  // blocks 0, 2, 4 recomputed
  EXPECT_EQ(none - every3, (L / 3 - 1) * block);  // blocks 0, 3
  EXPECT_EQ(none - selective, (L - 1) * core);
}

TEST(gpt_recompute, whole_model_gradient_matches_finite_differences_with_full_recompute) {
  const GPTConfig cfg = odd_gpt_shape();
  GPT m(cfg);
  m.init_weights(7);
  perturb_biases_and_gains(m, 8);
  m.set_recompute(Recompute::full());
  const int B = 2, T = 5;
  auto in = random_tokens(B * T, cfg.vocab_size, 1), tg = random_tokens(B * T, cfg.vocab_size, 2);
  m.zero_grad();
  m.forward(in.data(), tg.data(), B, T);
  m.backward();
  // Every layer's tensors plus the final LayerNorm, through the recomputed blocks.
  for (auto& [name, p] : m.params().named()) {
    if (name == "wte.weight" || name == "wpe.weight") continue;
    Tensor g;
    for (auto& [gn, gt] : m.grads().named())
      if (gn == name) g = gt;
    std::vector<float> x(p.data<float>(), p.data<float>() + p.numel());
    std::vector<float> analytic(g.data<float>(), g.data<float>() + g.numel());
    meshtrain::testing::expect_gradient(
        name.c_str(), x, analytic,
        [&] {
          std::copy(x.begin(), x.end(), p.data<float>());
          return static_cast<double>(m.forward(in.data(), tg.data(), B, T));
        },
        // As gpt_test's whole-model check: an f32 loss of ~4 differenced over
        // 2 eps moves in steps of 2.4e-5; atol is ~8 of them. Measured
        // |a-n| <= 1.8e-5, at most 9% of the tolerance at every ISA level.
        1e-2f, 3e-2, 2e-4, 6);
    std::copy(x.begin(), x.end(), p.data<float>());
  }
}

TEST(gpt_recompute, bad_policies_and_misuse_give_clear_errors) {
  EXPECT_THROW(Recompute::every_k(0), Error);
  GPT m(gpt_preset("tiny"));
  m.init_weights(1);
  EXPECT_THROW(m.set_recompute(Recompute{Recompute::Mode::EveryK, 0}), Error);
  auto in = random_tokens(16, 61, 1);
  m.forward(in.data(), in.data(), 1, 16);
  m.set_recompute(Recompute::full());  // a new layout: the last forward is gone
  try {
    m.backward();
    FAIL() << "expected an error: backward after the policy changed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("forward"), std::string::npos) << e.what();
  }
  EXPECT_EQ(m.recompute().name(), "full");
  EXPECT_EQ(Recompute::every_k(4).name(), "every:4");
}
