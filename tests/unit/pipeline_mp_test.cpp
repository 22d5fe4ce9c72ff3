// Pipeline parallelism across real processes over the shm transport: each
// rank holds its stage (one model per chunk) of a 4-layer GPT or Llama and
// runs its instruction list of the schedule (PipelineExecutor), activations
// and their gradients moving by send/recv. One step over 4 micro-batches
// gives the last stage the whole model's losses bit for bit and every rank
// the whole model's accumulated gradients of the parameters it holds, bit
// for bit, except GPT's tied wte, whose two holders both end with the sum of
// the lookup's and the head's gradients (within roundings of the whole
// model's, and the same bits on both). GPipe and 1F1B at 2 and 4 stages
// (uneven layer counts at 3), interleaved at 2 stages x 2 chunks, and
// zb-h1 (each backward split in its input and weight parts) at 2 and 4.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>

#include "../comm/harness.h"
#include "meshtrain/core/error.h"
#include "meshtrain/nn/gpt_spec.h"
#include "meshtrain/nn/llama_spec.h"
#include "meshtrain/parallel/make_gradient_sync.h"
#include "meshtrain/parallel/pipeline_executor.h"
#include "meshtrain/train/train_step.h"

using namespace meshtrain;
using meshtrain::comm::Communicator;
using meshtrain::comm::testing::run_world;

namespace {

std::shared_ptr<const ModelSpec> four_layers(const std::string& family) {
  if (family == "gpt") {
    GPTConfig c = gpt_preset("tiny");
    c.n_layer = 4;
    return GPTSpec::make(c);
  }
  LlamaConfig c = llama_preset("llama-tiny");
  c.n_layer = 4;
  return LlamaSpec::make(c);
}

struct Batch {
  std::vector<int32_t> inputs, targets;
};

std::vector<Batch> batches(int m, int B, int T, int V) {
  std::mt19937 rng(11);
  std::vector<Batch> out(static_cast<size_t>(m));
  for (Batch& b : out)
    for (int i = 0; i < B * T; ++i) {
      b.inputs.push_back(static_cast<int32_t>(rng() % V));
      b.targets.push_back(i == 2 ? -1 : static_cast<int32_t>(rng() % V));
    }
  return out;
}

std::map<std::string, std::vector<float>> grads_by_name(const Model& m) {
  std::map<std::string, std::vector<float>> out;
  const float* g = m.grad_buffer().data<float>();
  for (const ParamInfo& p : m.layout().params) out[p.name].assign(g + p.begin, g + p.end());
  return out;
}

// This rank's stage of `family` under `kind`, checked against the whole model.
std::string run_stage(Communicator& pp, const std::string& family, plan::PipeSchedule kind,
                      int64_t chunks) {
  const int m = 4, B = 2, T = 8;
  auto whole = four_layers(family);
  const int64_t p = pp.size();
  const auto shards = parallel::pipeline_shards(4, p, chunks);
  std::vector<std::shared_ptr<const ModelSpec>> specs;
  for (const ModelShard& s : shards) specs.push_back(whole->sharded(s));
  std::vector<std::unique_ptr<Model>> owned;
  std::vector<Model*> mine;
  for (int64_t c = 0; c < chunks; ++c) {
    owned.push_back(specs[static_cast<size_t>(c * p + pp.rank())]->build());
    owned.back()->init_weights(9);
    mine.push_back(owned.back().get());
  }
  parallel::PipelineExecutor exec(pp, specs, mine, kind, m);
  const auto data = batches(m, B, T, whole->vocab_size());
  std::vector<MicroBatch> micro;
  for (const Batch& b : data) micro.push_back({b.inputs.data(), b.targets.data(), B, T});
  const std::vector<float> losses = exec.run(micro, 1.0f / m);

  // The whole model, accumulating the same micro-batches.
  auto ref = whole->build();
  ref->init_weights(9);
  std::vector<float> want;
  for (const MicroBatch& mb : micro) {
    want.push_back(ref->forward(mb));
    ref->backward(1.0f / m);
  }
  const bool last = pp.rank() == p - 1;
  for (int i = 0; i < m; ++i)
    if (last ? losses[i] != want[i] : !std::isnan(losses[i]))
      return fmt::format("micro-batch {}: loss {} on rank {}, the whole model's {}", i, losses[i],
                         pp.rank(), want[i]);
  const auto ref_grads = grads_by_name(*ref);
  for (Model* c : mine)
    for (const auto& [name, g] : grads_by_name(*c)) {
      const std::vector<float>& r = ref_grads.at(name);
      float largest = 0, worst = 0;
      for (size_t k = 0; k < g.size(); ++k) {
        largest = std::max(largest, std::abs(r[k]));
        worst = std::max(worst, std::abs(g[k] - r[k]));
      }
      const bool tied = name == "wte.weight";  // summed over its two holders
      if (tied ? worst > 1e-6f * largest : worst != 0)
        return fmt::format("rank {}: gradient of {} differs by {} (largest {})", pp.rank(), name,
                           worst, largest);
    }
  // Both holders of a tied parameter end with the same bits.
  if (family == "gpt" && (pp.rank() == 0 || last) && p > 1) {
    const auto g = grads_by_name(*mine[pp.rank() == 0 ? 0 : chunks - 1]).at("wte.weight");
    std::vector<float> other(g.size());
    const int peer = pp.rank() == 0 ? static_cast<int>(p - 1) : 0;
    auto sent = pp.send(g.data(), g.size(), DType::F32, peer);
    pp.recv(other.data(), other.size(), DType::F32, peer).wait();
    sent.wait();
    if (other != g) return "the two copies of wte hold different gradients";
  }
  return "";
}

class pipeline_mp : public ::testing::TestWithParam<const char*> {};

}  // namespace

TEST_P(pipeline_mp, gpipe_and_1f1b_steps_equal_the_whole_model_at_2_and_4_stages) {
  const std::string family = GetParam();
  for (int p : {2, 4})
    for (auto kind : {plan::PipeSchedule::GPipe, plan::PipeSchedule::OneFOneB}) {
      auto w = run_world(p, [&](Communicator& c) { return run_stage(c, family, kind, 1); });
      EXPECT_TRUE(w.ok()) << plan::pipe_schedule_name(kind) << " p " << p << "\n" << w.report();
    }
}

TEST_P(pipeline_mp, uneven_stages_and_interleaved_chunks_equal_the_whole_model) {
  const std::string family = GetParam();
  auto three = run_world(3, [&](Communicator& c) {
    return run_stage(c, family, plan::PipeSchedule::OneFOneB, 1);  // layers 2 + 1 + 1
  });
  EXPECT_TRUE(three.ok()) << three.report();
  auto il = run_world(2, [&](Communicator& c) {
    return run_stage(c, family, plan::PipeSchedule::Interleaved, 2);
  });
  EXPECT_TRUE(il.ok()) << il.report();
}

TEST_P(pipeline_mp, zero_bubble_split_backwards_equal_the_whole_model_at_2_and_4_stages) {
  const std::string family = GetParam();
  for (int p : {2, 4}) {
    auto w = run_world(p, [&](Communicator& c) {
      return run_stage(c, family, plan::PipeSchedule::ZeroBubbleH1, 1);
    });
    EXPECT_TRUE(w.ok()) << "zb-h1 p " << p << "\n" << w.report();
  }
}

INSTANTIATE_TEST_SUITE_P(families, pipeline_mp, ::testing::Values("gpt", "llama"));

TEST(pipeline, shards_split_layers_evenly_and_refuse_too_few) {
  const auto s = parallel::pipeline_shards(7, 3, 1);
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(std::make_pair(s[0].layer_begin, s[0].layer_end), std::make_pair(0, 3));
  EXPECT_EQ(std::make_pair(s[1].layer_begin, s[1].layer_end), std::make_pair(3, 5));
  EXPECT_EQ(std::make_pair(s[2].layer_begin, s[2].layer_end), std::make_pair(5, 7));
  EXPECT_TRUE(s[0].first_stage && !s[0].last_stage && s[2].last_stage);
  EXPECT_THROW(parallel::pipeline_shards(3, 2, 2), Error);
}

namespace {

// Five training steps (AdamW, clipping on) of the whole model on one rank,
// or of this rank's stage through the pipeline: each step's loss and
// gradient norm, and the parameters at the end by name.
struct Trained {
  std::vector<double> losses, norms;
  std::map<std::string, std::vector<float>> params;
};

Trained train_steps(const std::string& family, Communicator* pp, plan::PipeSchedule kind) {
  const int m = 4, B = 2, T = 8, steps = 5;
  auto whole = four_layers(family);
  std::shared_ptr<const ModelSpec> spec = whole;
  std::vector<std::shared_ptr<const ModelSpec>> specs;
  if (pp) {
    for (const ModelShard& s : parallel::pipeline_shards(4, pp->size(), 1)) specs.push_back(whole->sharded(s));
    spec = specs[static_cast<size_t>(pp->rank())];
  }
  parallel::SyncedModel synced = parallel::make_synced_model(Communicator(), spec, {});
  synced.model->init_weights(9);
  LrSchedule sched;
  sched.max_lr = 3e-3f;
  sched.kind = "constant";
  TrainStep step(*synced.model, *synced.sync, OptimizerConfig{}, sched, /*clip=*/0.5f);
  std::unique_ptr<parallel::PipelineExecutor> exec;
  if (pp) {
    exec = std::make_unique<parallel::PipelineExecutor>(*pp, specs, std::vector<Model*>{synced.model.get()}, kind, m);
    step.set_pipeline(exec.get(), pp);
  }
  Trained out;
  for (int s = 0; s < steps; ++s) {
    const auto data = batches(m, B, T, whole->vocab_size());  // the same batches every step
    std::vector<MicroBatch> micro;
    for (const Batch& b : data) micro.push_back({b.inputs.data(), b.targets.data(), B, T});
    const StepStats st = step.run(micro, s);
    out.losses.push_back(st.loss);
    out.norms.push_back(st.grad_norm);
  }
  const float* p = synced.model->param_buffer().data<float>();
  for (const ParamInfo& info : synced.model->layout().params) out.params[info.name].assign(p + info.begin, p + info.end());
  return out;
}

}  // namespace

// Training steps through the pipeline (TrainStep with set_pipeline): every
// stage sees the whole model's loss and gradient norm at each of 5 AdamW
// steps with clipping (relative 1e-5: the tied wte's two gradient halves
// are summed in another order), and ends with the whole model's parameters.
TEST_P(pipeline_mp, training_steps_through_the_pipeline_match_one_rank) {
  const std::string family = GetParam();
  for (auto kind : {plan::PipeSchedule::GPipe, plan::PipeSchedule::OneFOneB}) {
    auto w = run_world(2, [&](Communicator& c) -> std::string {
      // The reference runs in each rank: OpenMP's threads do not survive a fork.
      const Trained want = train_steps(family, nullptr, kind);
      const Trained got = train_steps(family, &c, kind);
      for (size_t s = 0; s < want.losses.size(); ++s) {
        if (std::abs(got.losses[s] - want.losses[s]) > 1e-5 * std::abs(want.losses[s]) ||
            std::abs(got.norms[s] - want.norms[s]) > 1e-5 * std::abs(want.norms[s]))
          return fmt::format("step {}: loss {} norm {} vs the whole model's {} and {}", s + 1,
                             got.losses[s], got.norms[s], want.losses[s], want.norms[s]);
      }
      for (const auto& [name, v] : got.params) {
        const auto& r = want.params.at(name);
        for (size_t k = 0; k < v.size(); ++k)
          if (std::abs(v[k] - r[k]) > 1e-5f) return fmt::format("{}[{}]: {} vs {}", name, k, v[k], r[k]);
      }
      return "";
    });
    EXPECT_TRUE(w.ok()) << plan::pipe_schedule_name(kind) << "\n" << w.report();
  }
}
