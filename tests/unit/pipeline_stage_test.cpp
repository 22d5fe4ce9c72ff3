// A GPT or a Llama cut into pipeline stages (uneven layer ranges: [0,1),
// [1,3), [3,4)) and run stage after stage, each handing its output to the
// next and the input gradient back, computes exactly what the whole model
// computes: each
// stage's initial weights are the whole model's under the same names, the
// loss is the same bits, every gradient is the same bits, except GPT's tied
// embedding, whose two halves (the first stage's lookup, the last stage's
// head) add up to the whole model's wte gradient (within a few roundings:
// the same terms summed in another order). fp32 and bf16, with and
// without recompute; the stages' activation memory is what their specs
// predict; a stage given the wrong inputs says what it needs; the split
// backward of zero-bubble schedules computes the same floats.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "meshtrain/core/error.h"
#include "meshtrain/core/memory.h"
#include "meshtrain/core/threads.h"
#include "meshtrain/nn/gpt_spec.h"
#include "meshtrain/nn/llama_spec.h"
#include "meshtrain/nn/model_registry.h"
#include "meshtrain/plan/pipeline_schedule.h"

using namespace meshtrain;

namespace {

GPTConfig four_layers() {
  GPTConfig c = gpt_preset("tiny");
  c.n_layer = 4;
  return c;
}

// The whole four-layer model of a family.
std::shared_ptr<const ModelSpec> four_layer_spec(const std::string& family) {
  if (family == "gpt") return GPTSpec::make(four_layers());
  LlamaConfig c = llama_preset("llama-tiny");
  c.n_layer = 4;
  return LlamaSpec::make(c);
}

ModelShard stage(int begin, int end, int n_layer) {
  ModelShard s;
  s.layer_begin = begin;
  s.layer_end = end;
  s.first_stage = begin == 0;
  s.last_stage = end == n_layer;
  return s;
}

// name -> values of a model's parameters (or gradients).
std::map<std::string, std::vector<float>> by_name(const Model& m, const Tensor& flat) {
  std::map<std::string, std::vector<float>> out;
  const float* p = flat.data<float>();
  for (const ParamInfo& info : m.layout().params)
    out[info.name].assign(p + info.begin, p + info.end());
  return out;
}

struct Batch {
  std::vector<int32_t> inputs, targets;
};

Batch random_batch(int B, int T, int V, unsigned seed) {
  std::mt19937 rng(seed);
  Batch b{std::vector<int32_t>(B * T), std::vector<int32_t>(B * T)};
  for (int i = 0; i < B * T; ++i) {
    b.inputs[i] = static_cast<int32_t>(rng() % V);
    b.targets[i] = static_cast<int32_t>(rng() % V);
  }
  b.targets[3] = -1;  // an ignored position
  return b;
}

struct Models {
  std::unique_ptr<Model> whole;
  std::vector<std::unique_ptr<Model>> stages;
};

Models build(const std::string& family, Precision precision, Recompute recompute) {
  Models r;
  auto spec = four_layer_spec(family);
  r.whole = spec->build();
  for (auto [b, e] : {std::pair{0, 1}, {1, 3}, {3, 4}})
    r.stages.push_back(spec->sharded(stage(b, e, 4))->build());
  for (Model* m : {r.whole.get(), r.stages[0].get(), r.stages[1].get(), r.stages[2].get()}) {
    m->init_weights(7);
    m->set_precision(precision);
    m->set_recompute(recompute);
  }
  return r;
}

class pipeline_stages
    : public ::testing::TestWithParam<std::tuple<const char*, Precision, const char*>> {};

}  // namespace

TEST_P(pipeline_stages, chained_stages_compute_the_whole_model_bit_for_bit) {
  const auto [family, precision, recompute] = GetParam();
  Models r = build(family, precision, std::string(recompute) == "full" ? Recompute::full() : Recompute::none());
  const auto whole_params = by_name(*r.whole, r.whole->param_buffer());
  for (const auto& s : r.stages)
    for (const auto& [name, values] : by_name(*s, s->param_buffer()))
      ASSERT_EQ(values, whole_params.at(name)) << name << ": a stage starts from other weights";

  const int B = 2, T = 16;
  const Batch b = random_batch(B, T, r.whole->spec().vocab_size(), 5);
  const float whole_loss = r.whole->forward({b.inputs.data(), b.targets.data(), B, T});
  r.whole->backward(1.0f);

  const float* x = nullptr;
  float loss = 0;
  for (size_t i = 0; i < r.stages.size(); ++i) {
    const bool last = i + 1 == r.stages.size();
    loss = r.stages[i]->forward_stage({i == 0 ? b.inputs.data() : nullptr,
                                       last ? b.targets.data() : nullptr, B, T}, x);
    if (!last) {
      EXPECT_TRUE(std::isnan(loss));
      x = r.stages[i]->stage_output();
      ASSERT_NE(x, nullptr);
    }
  }
  EXPECT_EQ(loss, whole_loss);
  const float* g = nullptr;
  for (size_t i = r.stages.size(); i-- > 0;) {
    r.stages[i]->backward_stage(g, 1.0f);
    g = r.stages[i]->stage_input_grad();
    EXPECT_EQ(g == nullptr, i == 0);
  }

  const auto whole_grads = by_name(*r.whole, r.whole->grad_buffer());
  std::vector<float> wte(whole_grads.count("wte.weight") ? whole_grads.at("wte.weight").size() : 0, 0.f);
  for (const auto& s : r.stages)
    for (const auto& [name, values] : by_name(*s, s->grad_buffer())) {
      if (name == "wte.weight") {  // GPT's tied embedding, on the first and the last stage
        for (size_t k = 0; k < values.size(); ++k) wte[k] += values[k];
        continue;
      }
      ASSERT_EQ(values, whole_grads.at(name)) << name;
    }
  // The first stage's lookup plus the last stage's head: the same terms in
  // another order (the whole model adds a repeated token's rows onto the
  // head's gradient one by one), so equal within a few roundings.
  if (std::string(family) != "gpt") return;
  const std::vector<float>& want = whole_grads.at("wte.weight");
  float largest = 0;
  for (float v : want) largest = std::max(largest, std::abs(v));
  for (size_t k = 0; k < wte.size(); ++k)
    ASSERT_NEAR(wte[k], want[k], 1e-6f * largest) << "wte gradient element " << k;
}

INSTANTIATE_TEST_SUITE_P(families, pipeline_stages,
                         ::testing::Combine(::testing::Values("gpt", "llama"),
                                            ::testing::Values(Precision::FP32, Precision::BF16),
                                            ::testing::Values("none", "full")));

TEST(pipeline_stage, layouts_units_and_memory_follow_the_layer_range) {
  const GPTConfig cfg = four_layers();
  auto spec = GPTSpec::make(cfg);
  auto first = spec->sharded(stage(0, 1, 4)), middle = spec->sharded(stage(1, 3, 4)),
       last = spec->sharded(stage(3, 4, 4));
  EXPECT_EQ(first->layout().params.front().name, "wte.weight");
  EXPECT_EQ(first->layout().params[1].name, "wpe.weight");
  EXPECT_EQ(first->layout().params.back().name, "h.0.mlp.c_proj.bias");
  EXPECT_EQ(middle->layout().params.front().name, "h.1.ln_1.weight");
  EXPECT_EQ(middle->layout().num_units(), 2);
  EXPECT_EQ(last->layout().params.front().name, "wte.weight");  // the tied head
  EXPECT_EQ(last->layout().params.back().name, "ln_f.bias");
  EXPECT_EQ(last->layout().units.front().name, "head");
  // Every parameter but wte is held by exactly one stage.
  const int64_t wte = spec->layout().params.front().numel();
  EXPECT_EQ(first->num_params() + middle->num_params() + last->num_params(), spec->num_params() + wte);
  auto lspec = four_layer_spec("llama");
  auto lfirst = lspec->sharded(stage(0, 1, 4)), lmiddle = lspec->sharded(stage(1, 3, 4)),
       llast = lspec->sharded(stage(3, 4, 4));
  EXPECT_EQ(lmiddle->layout().params.front().name, "model.layers.1.input_layernorm.weight");
  EXPECT_EQ(llast->layout().params.back().name, "lm_head.weight");
  EXPECT_EQ(lfirst->num_params() + lmiddle->num_params() + llast->num_params(), lspec->num_params());
  // Each stage allocates exactly the activations its spec predicts.
  for (auto s : {first, middle, last, lfirst, lmiddle, llast}) {
    auto m = s->build();
    m->init_weights(1);
    mem_reset_peaks();
    const int64_t before = mem_stats().current[static_cast<size_t>(MemCategory::Activations)];
    const Batch b = random_batch(2, 8, s->vocab_size(), 1);
    std::vector<float> x(static_cast<size_t>(2 * 8 * m->stage_width()), 0.1f);
    m->forward_stage({b.inputs.data(), b.targets.data(), 2, 8}, s->shard().first_stage ? nullptr : x.data());
    const int64_t used = mem_stats().current[static_cast<size_t>(MemCategory::Activations)] - before;
    EXPECT_EQ(used, s->memory(2, 8, 1, {}, Precision::FP32).activations) << s->describe();
  }
}

TEST(pipeline_stage, wrong_inputs_and_ranges_are_named) {
  const GPTConfig cfg = four_layers();
  auto spec = GPTSpec::make(cfg);
  auto middle = spec->sharded(stage(1, 3, 4))->build();
  middle->init_weights(1);
  const Batch b = random_batch(2, 8, cfg.vocab_size, 1);
  try {
    middle->forward_stage({b.inputs.data(), nullptr, 2, 8}, nullptr);
    FAIL() << "a middle stage ran without its input";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("forward needs the previous stage's output"), std::string::npos) << e.what();
  }
  EXPECT_THROW(spec->sharded(stage(2, 2, 4)), Error);  // empty
  ModelShard wrong = stage(1, 4, 4);
  wrong.first_stage = true;  // claims to embed without layer 0
  EXPECT_THROW(spec->sharded(wrong), Error);
  // The same checks hold for Llama's stages.
  auto llama = model_preset("llama-tiny");
  EXPECT_THROW(llama->sharded(stage(1, 1, 2)), Error);
  auto lmiddle = four_layer_spec("llama")->sharded(stage(1, 3, 4))->build();
  EXPECT_THROW(lmiddle->forward_stage({b.inputs.data(), nullptr, 2, 8}, nullptr), Error);
}

namespace {

// Runs one step of `kind` over virtual stages (p stages x v chunks, each a
// model of one layer range) in the order its replay finishes the ops in,
// handing activations and gradients through host buffers; each virtual
// stage keeps its in-flight micro-batches in activation slots. Returns the
// micro-batches' losses.
std::vector<float> run_schedule(plan::PipeSchedule kind, int64_t p, int64_t v,
                                std::vector<std::unique_ptr<Model>>& vstages,
                                const std::vector<Batch>& batches, int B, int T) {
  const int64_t m = static_cast<int64_t>(batches.size()), V = p * v;
  const auto ops = plan::pipeline_schedule(kind, p, m, v);
  const plan::ScheduleReplay r = plan::replay_schedule(ops, v, 1, 2);
  struct Timed {
    double start;
    int64_t stage;
    plan::PipeOp op;
  };
  std::vector<Timed> order;
  for (int64_t s = 0; s < p; ++s)
    for (const plan::OpTiming& t : r.timeline[static_cast<size_t>(s)]) order.push_back({t.start, s, t.op});
  std::stable_sort(order.begin(), order.end(), [](const Timed& a, const Timed& b) { return a.start < b.start; });
  // 1F1B keeps p - s micro-batches in flight: slot = micro-batch mod that.
  auto slots_of = [&](int64_t vs) { return kind == plan::PipeSchedule::OneFOneB ? std::min(m, p - vs) : m; };
  for (int64_t vs = 0; vs < V; ++vs) vstages[static_cast<size_t>(vs)]->set_activation_slots(static_cast<int>(slots_of(vs)));
  const int64_t width = static_cast<int64_t>(B) * T * vstages[0]->stage_width();
  std::map<std::pair<int64_t, int64_t>, std::vector<float>> acts, grads;  // (vs, mb) -> data
  std::vector<float> losses(static_cast<size_t>(m), 0.f);
  for (const Timed& t : order) {
    const int64_t vs = plan::virtual_stage(t.stage, t.op.chunk, p), mb = t.op.micro_batch;
    Model& model = *vstages[static_cast<size_t>(vs)];
    model.select_slot(static_cast<int>(mb % slots_of(vs)));
    const Batch& b = batches[static_cast<size_t>(mb)];
    if (t.op.forward) {
      const float* in = vs > 0 ? acts.at({vs - 1, mb}).data() : nullptr;
      const float loss = model.forward_stage({vs == 0 ? b.inputs.data() : nullptr,
                                              vs + 1 == V ? b.targets.data() : nullptr, B, T}, in);
      if (vs + 1 == V) losses[static_cast<size_t>(mb)] = loss;
      else acts[{vs, mb}].assign(model.stage_output(), model.stage_output() + width);
    } else {
      model.backward_stage(vs + 1 < V ? grads.at({vs + 1, mb}).data() : nullptr, 1.0f / static_cast<float>(m));
      if (vs > 0) grads[{vs, mb}].assign(model.stage_input_grad(), model.stage_input_grad() + width);
    }
  }
  return losses;
}

class pipeline_schedules
    : public ::testing::TestWithParam<std::tuple<const char*, plan::PipeSchedule>> {};

}  // namespace

// Every schedule over stages whose micro-batches share activation slots
// equals gradient accumulation over the whole model: the same losses and,
// since each stage takes its backwards in micro-batch order, the same
// gradients bit for bit (GPT's wte halves within roundings). 4 layers: 4
// stages of one layer, or 2 stages x 2 chunks interleaved; 4 micro-batches.
TEST_P(pipeline_schedules, a_step_over_stages_equals_accumulation_over_the_whole_model) {
  const auto [family, kind] = GetParam();
  const int64_t v = kind == plan::PipeSchedule::Interleaved ? 2 : 1, p = 4 / v, m = 4;
  auto spec = four_layer_spec(family);
  auto whole = spec->build();
  whole->init_weights(3);
  std::vector<std::unique_ptr<Model>> vstages;
  for (int l = 0; l < 4; ++l) {
    vstages.push_back(spec->sharded(stage(l, l + 1, 4))->build());
    vstages.back()->init_weights(3);
  }
  const int B = 2, T = 8;
  std::vector<Batch> batches;
  std::vector<float> want;
  for (int i = 0; i < m; ++i) batches.push_back(random_batch(B, T, spec->vocab_size(), 20 + i));
  for (const Batch& b : batches) {
    want.push_back(whole->forward({b.inputs.data(), b.targets.data(), B, T}));
    whole->backward(1.0f / m);
  }
  EXPECT_EQ(run_schedule(kind, p, v, vstages, batches, B, T), want);
  const auto whole_grads = by_name(*whole, whole->grad_buffer());
  std::vector<float> wte(whole_grads.count("wte.weight") ? whole_grads.at("wte.weight").size() : 0, 0.f);
  for (const auto& s : vstages)
    for (const auto& [name, values] : by_name(*s, s->grad_buffer())) {
      if (name == "wte.weight") {
        for (size_t k = 0; k < values.size(); ++k) wte[k] += values[k];
        continue;
      }
      ASSERT_EQ(values, whole_grads.at(name)) << name;
    }
  if (wte.empty()) return;
  const std::vector<float>& ref = whole_grads.at("wte.weight");
  float largest = 0;
  for (float x : ref) largest = std::max(largest, std::abs(x));
  for (size_t k = 0; k < wte.size(); ++k) ASSERT_NEAR(wte[k], ref[k], 1e-6f * largest) << k;
}

INSTANTIATE_TEST_SUITE_P(families, pipeline_schedules,
                         ::testing::Combine(::testing::Values("gpt", "llama"),
                                            ::testing::Values(plan::PipeSchedule::GPipe,
                                                              plan::PipeSchedule::OneFOneB,
                                                              plan::PipeSchedule::Interleaved)));

TEST(pipeline_stage, slots_hold_separate_micro_batches_and_count_their_memory) {
  auto spec = four_layer_spec("gpt")->sharded(stage(0, 2, 4));
  auto m = spec->build();
  m->init_weights(1);
  m->set_activation_slots(3);
  EXPECT_EQ(m->activation_slots(), 3);
  const int64_t before = mem_stats().current[static_cast<size_t>(MemCategory::Activations)];
  std::vector<std::vector<float>> outs;
  for (int k = 0; k < 3; ++k) {
    const Batch b = random_batch(2, 8, spec->vocab_size(), 40 + k);
    m->select_slot(k);
    m->forward_stage({b.inputs.data(), nullptr, 2, 8}, nullptr);
    outs.emplace_back(m->stage_output(), m->stage_output() + 2 * 8 * m->stage_width());
  }
  const int64_t used = mem_stats().current[static_cast<size_t>(MemCategory::Activations)] - before;
  EXPECT_EQ(used, 3 * spec->memory(2, 8, 1, {}, Precision::FP32).activations);
  for (int k = 0; k < 3; ++k) {  // each slot still holds its own micro-batch's output
    m->select_slot(k);
    EXPECT_EQ(std::vector<float>(m->stage_output(), m->stage_output() + outs[k].size()), outs[k]) << k;
  }
  EXPECT_THROW(m->select_slot(3), Error);
  m->set_activation_slots(1);  // frees the others
  EXPECT_EQ(mem_stats().current[static_cast<size_t>(MemCategory::Activations)], before);
}

// Zero-bubble schedules split each backward: the input part of micro-batches
// 0 and 1, then their weight parts, through every stage, compute the same
// floats as two whole backwards (gradients and the input gradients sent
// back), report the same ranges finished in the same order, and each slot
// holds exactly its queued operands (ModelMemory::deferred_weights).
TEST_P(pipeline_stages, split_backward_computes_what_the_whole_backward_does) {
  const auto [family, precision, recompute] = GetParam();
  const Recompute rc = std::string(recompute) == "full" ? Recompute::full() : Recompute::none();
  Models whole = build(family, precision, rc), split = build(family, precision, rc);
  const int B = 2, T = 16, S = static_cast<int>(whole.stages.size());
  const int64_t before = mem_stats().current[static_cast<size_t>(MemCategory::Activations)];
  std::vector<std::vector<std::pair<int64_t, int64_t>>> ready[2];
  for (int w = 0; w < 2; ++w) {
    Models& r = w == 0 ? whole : split;
    ready[w].resize(static_cast<size_t>(S));
    for (int i = 0; i < S; ++i) {
      r.stages[static_cast<size_t>(i)]->set_activation_slots(2);
      r.stages[static_cast<size_t>(i)]->set_grad_ready_hook(
          [&, w, i](int64_t b, int64_t e) { ready[w][static_cast<size_t>(i)].push_back({b, e}); });
    }
  }
  std::vector<Batch> batches{random_batch(B, T, whole.whole->spec().vocab_size(), 5),
                             random_batch(B, T, whole.whole->spec().vocab_size(), 6)};
  auto forward = [&](Models& r, int k) {
    const float* x = nullptr;
    for (int i = 0; i < S; ++i) {
      Model& m = *r.stages[static_cast<size_t>(i)];
      m.select_slot(k);
      m.forward_stage({i == 0 ? batches[k].inputs.data() : nullptr,
                       i + 1 == S ? batches[k].targets.data() : nullptr, B, T}, x);
      x = m.stage_output();
    }
  };
  // Each backward chain returns the input gradients each stage sent back.
  auto backward = [&](Models& r, int k, bool input_part) {
    std::vector<std::vector<float>> sent;
    const float* g = nullptr;
    for (int i = S; i-- > 0;) {
      Model& m = *r.stages[static_cast<size_t>(i)];
      m.select_slot(k);
      if (input_part) m.backward_stage_input(g, 0.5f);
      else m.backward_stage(g, 0.5f);
      g = m.stage_input_grad();
      if (g) sent.emplace_back(g, g + B * T * m.stage_width());
    }
    return sent;
  };
  for (int k = 0; k < 2; ++k) forward(whole, k), forward(split, k);
  for (int k = 0; k < 2; ++k)
    EXPECT_EQ(backward(split, k, true), backward(whole, k, false)) << "input gradients of micro-batch " << k;
  // Both slots hold their micro-batch's activations and queued operands.
  int64_t want = 0;
  for (const auto& s : split.stages) {
    const ModelMemory mm = s->spec().memory(B, T, thread_count(), rc, precision);
    want += 2 * (mm.activations + mm.deferred_weights) + 2 * mm.activations;  // split, then whole
  }
  EXPECT_EQ(mem_stats().current[static_cast<size_t>(MemCategory::Activations)] - before, want);
  for (int k = 0; k < 2; ++k)
    for (int i = S; i-- > 0;) {
      split.stages[static_cast<size_t>(i)]->select_slot(k);
      split.stages[static_cast<size_t>(i)]->backward_stage_weights();
    }
  for (int i = 0; i < S; ++i) {
    const Model& a = *whole.stages[static_cast<size_t>(i)];
    const Model& b = *split.stages[static_cast<size_t>(i)];
    EXPECT_EQ(by_name(b, b.grad_buffer()), by_name(a, a.grad_buffer())) << "stage " << i;
    EXPECT_EQ(ready[1][static_cast<size_t>(i)], ready[0][static_cast<size_t>(i)]) << "stage " << i;
  }
  // A weight part without its input part is refused with the reason.
  split.stages[0]->select_slot(0);
  EXPECT_THROW(split.stages[0]->backward_stage_weights(), Error);
}
