// LoRA with the frozen base held in 16 bits only (LoraConfig::base_precision,
// config lora.base_dtype): under mixed precision the base computes with its
// 16-bit copy, so releasing the f32 matrices changes no loss, logit or
// gradient bit; the allocator stops counting exactly the bytes the memory
// model takes off; merged exports read the matrices' 16-bit values; and the
// cases that cannot work are clear errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "error_of.h"
#include "random_tokens.h"
#include "meshtrain/core/half.h"
#include "meshtrain/core/memory.h"
#include "meshtrain/core/rng.h"
#include "meshtrain/nn/lora_spec.h"
#include "meshtrain/nn/model_registry.h"

using namespace meshtrain;
using meshtrain::testing::random_tokens;
using meshtrain::testing::error_of;

namespace {

std::shared_ptr<const LoraSpec> lora_of(const std::string& preset, bool half_base) {
  LoraConfig c;
  c.rank = 4;
  c.alpha = 8;
  c.base_precision = half_base ? Precision::BF16 : Precision::FP32;
  return LoraSpec::make(model_preset(preset), c);
}

// Base from seed 1, B random (every adapter gets a gradient), in `p`.
std::unique_ptr<Model> build(const std::shared_ptr<const LoraSpec>& spec, Precision p) {
  auto m = spec->build();
  m->set_precision(p);
  m->init_weights(1);
  float* a = m->param_buffer().data<float>();
  Rng r(7);
  for (const LoraSpec::Site& s : spec->sites())
    for (int64_t i = 0; i < s.rows * spec->config().rank; ++i) a[s.b + i] = 0.05f * r.normal();
  return m;
}

int64_t matrix_elems(const ModelSpec& base) {
  int64_t n = 0;
  for (const ParamInfo& p : base.layout().params)
    if (p.half_weight) n += p.numel();
  return n;
}

int64_t params_held() { return mem_stats().current[static_cast<size_t>(MemCategory::Parameters)]; }

class HalfBase : public ::testing::TestWithParam<const char*> {};

TEST_P(HalfBase, training_is_bit_identical_to_the_kept_base) {
  const auto kept_spec = lora_of(GetParam(), false), half_spec = lora_of(GetParam(), true);
  auto kept = build(kept_spec, Precision::BF16), half = build(half_spec, Precision::BF16);
  kept->weights_loaded();  // keeps the f32 base
  half->weights_loaded();  // releases it
  ASSERT_FALSE(kept->frozen_base()->f32_matrices_released());
  ASSERT_TRUE(half->frozen_base()->f32_matrices_released());
  // Released values must never be read again: poison them (a tiny model's
  // matrices share pages with other parameters, so not all read as zero).
  Model& base = *half->frozen_base();
  for (const ParamInfo& p : base.layout().params)
    if (p.half_weight)
      std::fill_n(base.param_buffer().data<float>() + p.begin, p.numel(), std::nanf(""));
  const int B = 2, T = 8, V = kept_spec->vocab_size();
  const int64_t P = kept_spec->num_params();
  for (int step = 0; step < 3; ++step) {
    const auto in = random_tokens(B * T, V, 20 + step), tg = random_tokens(B * T, V, 40 + step);
    for (Model* m : {kept.get(), half.get()}) {
      m->zero_grad();
      m->forward({in.data(), tg.data(), B, T});
      m->backward(1.f);
    }
    const int64_t logits = static_cast<int64_t>(B) * T * kept->logits_stride();
    EXPECT_EQ(std::memcmp(kept->logits(), half->logits(), sizeof(float) * logits), 0) << step;
    const float* gk = kept->grad_buffer().data<float>();
    const float* gh = half->grad_buffer().data<float>();
    ASSERT_EQ(std::memcmp(gk, gh, sizeof(float) * P), 0) << "adapter gradients differ at step " << step;
    // The same plain update on both, so the next step starts from moved adapters.
    for (Model* m : {kept.get(), half.get()}) {
      float* a = m->param_buffer().data<float>();
      const float* g = m->grad_buffer().data<float>();
      for (int64_t i = 0; i < P; ++i) a[i] -= 0.5f * g[i];
    }
  }
}

TEST_P(HalfBase, the_allocator_stops_counting_what_the_memory_model_takes_off) {
  const auto spec = lora_of(GetParam(), true);
  auto m = build(spec, Precision::BF16);
  const int64_t before = params_held();
  m->weights_loaded();
  const int64_t released = before - params_held();
  EXPECT_EQ(released, 4 * matrix_elems(spec->base()));
  const ModelMemory kept = lora_of(GetParam(), false)->memory(2, 8, 1, Recompute::none(), Precision::BF16);
  const ModelMemory half = spec->memory(2, 8, 1, Recompute::none(), Precision::BF16);
  EXPECT_EQ(kept.frozen_params - half.frozen_params, released);
  // fp32 runs hold the base in f32 whatever the config says it would do in 16 bits.
  EXPECT_EQ(spec->memory(2, 8, 1, Recompute::none(), Precision::FP32).frozen_params,
            4 * spec->base().num_params());
  m.reset();  // and everything comes back off the books with the model
  EXPECT_EQ(params_held(), before - 4 * spec->num_params() - kept.frozen_params);
}

TEST_P(HalfBase, merged_parameters_read_the_matrices_in_16_bits) {
  const auto kept_spec = lora_of(GetParam(), false), half_spec = lora_of(GetParam(), true);
  auto kept = build(kept_spec, Precision::BF16), half = build(half_spec, Precision::BF16);
  half->weights_loaded();
  // What the release keeps: every matrix rounded to bf16, the rest in f32.
  Model& base = *kept->frozen_base();
  float* w = base.param_buffer().data<float>();
  for (const ParamInfo& p : base.layout().params)
    if (p.half_weight)
      for (int64_t i = p.begin; i < p.end(); ++i) w[i] = bf16_to_f32(f32_to_bf16(w[i]));
  const Tensor want = kept->merged_parameters(kept->param_buffer());
  const Tensor got = half->merged_parameters(half->param_buffer());
  ASSERT_EQ(want.numel(), got.numel());
  EXPECT_EQ(std::memcmp(want.data<float>(), got.data<float>(), sizeof(float) * want.numel()), 0);
}

TEST_P(HalfBase, the_description_keeps_the_setting_only_when_set) {
  const auto half = lora_of(GetParam(), true), kept = lora_of(GetParam(), false);
  EXPECT_EQ(half->to_json().value("base_dtype", std::string()), "bf16");
  EXPECT_FALSE(kept->to_json().contains("base_dtype"));  // older checkpoints compare equal
  const auto back = LoraSpec::from_json(half->to_json(), "test");
  EXPECT_EQ(back->frozen_precision(), Precision::BF16);
  EXPECT_EQ(back->to_json(), half->to_json());
}

TEST_P(HalfBase, activations_make_room_for_the_merged_copy) {
  // The trainer frees them before it merges (the run's end, saving,
  // sampling); the next forward allocates them again and computes the same.
  const auto spec = lora_of(GetParam(), true);
  auto m = build(spec, Precision::BF16);
  m->weights_loaded();
  const auto acts = [] { return mem_stats().current[static_cast<size_t>(MemCategory::Activations)]; };
  const int64_t before = acts();
  const int B = 2, T = 8, V = spec->vocab_size();
  const auto in = random_tokens(B * T, V, 60), tg = random_tokens(B * T, V, 61);
  const float loss = m->forward({in.data(), tg.data(), B, T});
  ASSERT_GT(acts(), before);
  m->release_activations();
  EXPECT_EQ(acts(), before);
  EXPECT_EQ(m->forward({in.data(), tg.data(), B, T}), loss);
}

TEST_P(HalfBase, what_cannot_work_says_why) {
  // An f32 run computes with the f32 base: nothing to release.
  auto f32 = build(lora_of(GetParam(), true), Precision::FP32);
  EXPECT_NE(error_of([&] { f32->weights_loaded(); }).find("precision = bf16 or fp16"), std::string::npos);
  // Released: the precision is fixed.
  auto half = build(lora_of(GetParam(), true), Precision::BF16);
  half->weights_loaded();
  EXPECT_NE(error_of([&] { half->set_precision(Precision::FP32); }).find("released"), std::string::npos);
  // A trained (not frozen) model keeps its masters.
  auto trained = model_preset(GetParam())->build();
  trained->set_precision(Precision::BF16);
  EXPECT_NE(error_of([&] { trained->release_f32_matrices(); }).find("only a frozen model"),
            std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(families, HalfBase, ::testing::Values("llama-tiny", "tiny"));

}  // namespace
