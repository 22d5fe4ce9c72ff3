// test-links: mt_nn
// Activation recompute stays bit-identical when MESHTRAIN_SGEMM=auto times the
// f32 GEMM backends: the model's linear-layer GEMMs here are large enough to
// be timed, the recomputing run goes first (so the choices are made during
// its forward and reused by its re-run in backward), and its losses and
// gradients must equal a run that keeps every activation, bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "meshtrain/core/rng.h"
#include "meshtrain/kernels/cpu/sgemm_backend.h"
#include "meshtrain/kernels/cpu/sgemm_onednn.h"
#include "meshtrain/nn/gpt.h"

using namespace meshtrain;

namespace {

struct Result {
  std::vector<float> losses, grads;
};

Result train_two_micro_batches(const GPTConfig& cfg, const Recompute& rc, int B, int T) {
  GPT m(cfg);
  m.init_weights(3);
  m.set_recompute(rc);
  Rng r(9);
  std::vector<int32_t> in(2 * B * T), tg(2 * B * T);
  for (auto& x : in) x = static_cast<int32_t>(r.below(cfg.vocab_size));
  for (auto& x : tg) x = static_cast<int32_t>(r.below(cfg.vocab_size));
  Result out;
  m.zero_grad();
  for (int micro = 0; micro < 2; ++micro) {
    const int64_t off = static_cast<int64_t>(micro) * B * T;
    out.losses.push_back(m.forward(in.data() + off, tg.data() + off, B, T));
    m.backward(0.5f);
  }
  const float* g = m.grads().flat.data<float>();
  out.grads.assign(g, g + cfg.num_params());
  return out;
}

}  // namespace

TEST(gpt, recompute_is_bit_identical_under_sgemm_auto) {
  const cpu::SgemmPolicy before = cpu::sgemm_policy();
  cpu::set_sgemm_policy(cpu::SgemmPolicy::Auto);
  const GPTConfig cfg = gpt_preset("char-2L");  // C 128: qkv forward at B*T = 512 is 50 MFLOP
  const int B = 8, T = 64;
  const size_t choices_before = cpu::sgemm_choices().size();
  const Result full = train_two_micro_batches(cfg, Recompute::full(), B, T);
  if (cpu::onednn_sgemm_available()) {
    EXPECT_GE(cpu::sgemm_choices().size(), choices_before + 6)
        << "the linear layers' GEMMs were not timed: the test would not exercise auto";
  }
  const Result none = train_two_micro_batches(cfg, Recompute::none(), B, T);
  cpu::set_sgemm_policy(before);
  for (float l : none.losses) ASSERT_TRUE(std::isfinite(l));
  ASSERT_EQ(full.losses.size(), none.losses.size());
  EXPECT_EQ(0, std::memcmp(full.losses.data(), none.losses.data(), 4 * none.losses.size()))
      << full.losses[0] << " vs " << none.losses[0];
  ASSERT_EQ(full.grads.size(), none.grads.size());
  int64_t differing = 0;
  for (size_t i = 0; i < none.grads.size(); ++i)
    differing += std::memcmp(&full.grads[i], &none.grads[i], 4) != 0;
  EXPECT_EQ(differing, 0) << "of " << none.grads.size() << " gradients";
}
