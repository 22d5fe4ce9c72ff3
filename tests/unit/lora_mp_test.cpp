// test-links: mt_train
// LoRA under every gradient-sync strategy on real processes: adapters on a
// frozen llama-tiny or GPT tiny base train replicated and with ZeRO 1-3 on 2
// ranks (ZeRO-3 also on 3 ranks with accumulation, and in bf16) and
// reproduce the single-process run: every step's loss within 1e-5 and the
// final adapters within 5x that (bf16: the first loss within 1e-6, then
// bit-identical to another strategy on the same ranks), and every rank's
// frozen base is bit-identical to the one it started from.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <sstream>

#include "../comm/harness.h"
#include "meshtrain/core/rng.h"
#include "meshtrain/nn/lora_spec.h"
#include "meshtrain/nn/model_registry.h"
#include "meshtrain/parallel/make_gradient_sync.h"
#include "meshtrain/train/mixed_precision.h"
#include "meshtrain/train/train_step.h"
#include "run_difference.h"
#include "test_seed.h"

using namespace meshtrain;
using meshtrain::comm::Communicator;
using meshtrain::comm::testing::run_world;

namespace {

constexpr int kSteps = 5;
constexpr int kGlobalBatch = 6;
constexpr int kSeq = 8;

struct Setup {
  std::string preset;
  Precision precision = Precision::FP32;
};

struct TrainRun {
  std::vector<float> losses, params;  // params: elements [first, first + size)
  int64_t first = 0;
  bool base_unchanged = false;
  std::string strategy;
};

std::shared_ptr<const LoraSpec> lora_spec(const std::string& preset) {
  LoraConfig c;
  c.rank = 4;
  c.alpha = 8;
  return LoraSpec::make(model_preset(preset), c);
}

TrainRun train(const Communicator& comm, const Setup& setup, int stage, int accum) {
  const auto spec = lora_spec(setup.preset);
  parallel::GradientSyncOptions so;
  so.zero_stage = stage;
  so.persist_threshold = 0;  // stage 3 gathers every unit
  so.precision = setup.precision;
  parallel::SyncedModel synced = parallel::make_synced_model(comm, spec, so);
  Model& model = *synced.model;
  parallel::GradientSync& sync = *synced.sync;
  MixedPrecision mixed(model, MixedPrecisionOptions{setup.precision, {}});
  model.init_weights(4 + test_seed());
  const Tensor& base = model.frozen_base()->param_buffer();
  const std::vector<float> base0(base.data<float>(), base.data<float>() + base.numel());
  sync.before_resume();
  sync.after_resume();
  LrSchedule sched;
  sched.max_lr = 2e-2f;
  sched.kind = "constant";
  // Epsilon 1e-6, as in dp_harness.h: LoRA's B starts at zero, so Adam's
  // first steps move every element by ~lr whatever its gradient's size, and
  // an element whose gradient nearly cancels then takes a step whose sign is
  // rounding. With 1e-8 such an element put llama-tiny's adapters 1.1e-5
  // apart (seed 4) while the losses agreed to 1e-7.
  OptimizerConfig adamw;
  adamw.eps = 1e-6f;
  TrainStep stepper(model, sync, adamw, sched, /*clip=*/1.0f);
  stepper.set_mixed_precision(&mixed);
  const int world = comm.valid() ? comm.size() : 1, rank = comm.valid() ? comm.rank() : 0;
  const int per_rank = kGlobalBatch / world, per_micro = per_rank / accum;
  const int V = spec->vocab_size();
  TrainRun run;
  run.strategy = sync.name();
  std::vector<int32_t> in, tg;
  for (int64_t step = 0; step < kSteps; ++step) {
    Rng rng(1000);  // the same batch each step: the loss must fall
    in.resize(static_cast<size_t>(kGlobalBatch) * kSeq);
    tg.resize(in.size());
    for (size_t i = 0; i < in.size(); ++i) {
      in[i] = static_cast<int32_t>(rng.below(static_cast<uint64_t>(V)));
      tg[i] = (in[i] * 7 + 3) % V;
    }
    std::vector<MicroBatch> micro;
    for (int a = 0; a < accum; ++a) {
      const size_t first = static_cast<size_t>(rank * per_rank + a * per_micro) * kSeq;
      micro.push_back({in.data() + first, tg.data() + first, per_micro, kSeq});
    }
    run.losses.push_back(stepper.run(micro, step).loss);
  }
  sync.gather_full_parameters();
  // The whole model is current on rank 0; the other ranks keep their own
  // range current (ZeRO-3 holds no more).
  const float* p = model.param_buffer().data<float>();
  const ElemSpan keep = rank == 0 ? ElemSpan{0, model.param_buffer().numel()} : sync.update_range();
  run.first = keep.begin;
  run.params.assign(p + keep.begin, p + keep.end);
  sync.release_full_parameters();
  run.base_unchanged = std::memcmp(base0.data(), base.data<float>(), sizeof(float) * base0.size()) == 0;
  return run;
}

std::string compare(const TrainRun& got, const TrainRun& want, double tol) {
  const std::string base = got.base_unchanged ? "" : got.strategy + ": the frozen base changed; ";
  const auto from = want.params.begin() + got.first;
  const std::vector<float> part(from, from + static_cast<int64_t>(got.params.size()));
  return base + meshtrain::testing::run_difference(got.strategy, got.losses, want.losses, got.params,
                                                   part, tol, "adapter value", 5 * tol);
}

// Bit-identical losses and adapters over the range both runs hold on this
// rank (a ZeRO rank other than 0 keeps only its own range current).
std::string compare_exactly(const TrainRun& got, const TrainRun& partner) {
  std::string why = got.base_unchanged ? "" : got.strategy + ": the frozen base changed; ";
  if (got.losses != partner.losses) why += got.strategy + " and " + partner.strategy + ": losses differ; ";
  const int64_t b = std::max(got.first, partner.first);
  const int64_t e = std::min(got.first + static_cast<int64_t>(got.params.size()),
                             partner.first + static_cast<int64_t>(partner.params.size()));
  for (int64_t i = b; i < e; ++i)
    if (got.params[i - got.first] != partner.params[i - partner.first])
      return why + got.strategy + " and " + partner.strategy + ": parameter " + std::to_string(i) +
             " differs";
  return why;
}

void expect_matches_single_process(const Setup& setup, int ranks, int stage, int accum) {
  // f32: the ranks add the batch's gradients in another order than the
  // single process (halves of the batch, then the average), rounding noise
  // that stays at that size: over seeds 1-6 at every ISA level the losses
  // agreed to 1.2e-7 and the adapters to 1.8e-5, so 1e-5 for losses and 5x
  // that for adapters, as dp_harness.h compares parameters.
  constexpr double kTol = 1e-5;
  // Each rank computes the single-process reference itself: the parent must
  // not start OpenMP's threads before it forks the ranks.
  const auto w = run_world(ranks, [&](Communicator& c) {
    const TrainRun want = train(Communicator(), setup, 0, 1);
    if (!want.base_unchanged) return std::string("the single-process run changed its base");
    if (!(want.losses.back() < want.losses.front()))
      return "the single-process LoRA run did not learn: " + std::to_string(want.losses.front()) +
             " -> " + std::to_string(want.losses.back());
    const TrainRun got = train(c, setup, stage, accum);
    if (setup.precision == Precision::FP32) return compare(got, want, kTol);
    // bf16: the same f32 reassociation flips bf16 roundings of activations
    // from step 2 on, and Adam turns each flip into an lr-sized adapter
    // step, so the runs drift apart chaotically (seeds 5-9: 4e-7 to 3.7e-4);
    // no bound follows from the numerics. What does hold: step 1 computes
    // the single process's loss from the same 16-bit weights (per-rank
    // means averaged instead of one mean: a few f32 roundings, 1e-6), and
    // the strategies add the ranks' gradients in the same order, so another
    // strategy on the same ranks trains bit-identically (stage 1 beside
    // replicated; replicated beside ZeRO-2/3 without accumulation, since the
    // adapters are each reduced once).
    std::string why;
    if (std::abs(got.losses[0] - want.losses[0]) > 1e-6 * std::abs(want.losses[0]))
      why += got.strategy + " first loss " + std::to_string(got.losses[0]) + " vs single process " +
             std::to_string(want.losses[0]) + "; ";
    const TrainRun partner = train(c, setup, stage == 0 ? 1 : 0, accum);
    return why + compare_exactly(got, partner);
  });
  EXPECT_TRUE(w.ok()) << w.report();
}

}  // namespace

TEST(lora_mp, llama_replicated_2_ranks) { expect_matches_single_process({"llama-tiny"}, 2, 0, 1); }
TEST(lora_mp, llama_zero1_2_ranks) { expect_matches_single_process({"llama-tiny"}, 2, 1, 1); }
TEST(lora_mp, llama_zero2_2_ranks) { expect_matches_single_process({"llama-tiny"}, 2, 2, 1); }
TEST(lora_mp, llama_zero3_2_ranks) { expect_matches_single_process({"llama-tiny"}, 2, 3, 1); }
TEST(lora_mp, llama_zero3_3_ranks_accumulating) {
  expect_matches_single_process({"llama-tiny"}, 3, 3, 2);
}
TEST(lora_mp, llama_zero3_2_ranks_bf16) {
  expect_matches_single_process({"llama-tiny", Precision::BF16}, 2, 3, 1);
}
TEST(lora_mp, gpt_zero3_2_ranks) { expect_matches_single_process({"tiny"}, 2, 3, 1); }
TEST(lora_mp, gpt_replicated_2_ranks_bf16) {
  expect_matches_single_process({"tiny", Precision::BF16}, 2, 0, 1);
}
