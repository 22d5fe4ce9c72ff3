// test-links: mt_train mt_nn
// memory.limit_mb: the check refuses a run whose training does not fit, and
// one whose training fits but whose end (the whole-model copy saving and
// sampling make, after the activations are freed) does not.
#include <gtest/gtest.h>

#include <string>

#include "meshtrain/core/error.h"
#include "meshtrain/nn/gpt_spec.h"
#include "meshtrain/train/memory_model.h"
#include "meshtrain/train/memory_report.h"

using namespace meshtrain;

namespace {

MemoryPlan char6l_plan() {
  MemoryPlan plan;
  plan.model = GPTSpec::make(gpt_preset("char-6L"));
  plan.B = 2;
  plan.T = 64;
  plan.base = predict_training_memory(*plan.model, plan.B, plan.T, 1);
  return plan;
}

std::string refusal(const MemoryPlan& plan, double limit) {
  try {
    check_memory_limit(plan, limit);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(memory_limit, counts_the_product_copy_made_at_the_end) {
  MemoryPlan plan = char6l_plan();
  const RankMemory m = predict_rank_memory(plan);
  ASSERT_GT(m.activations, 0);
  // Without a product copy the end of the run needs less than training.
  EXPECT_LT(m.finish_total(), m.total());
  EXPECT_EQ(refusal(plan, static_cast<double>(m.total())), "");

  // A copy larger than the activations: training fits, the end does not.
  plan.product_copy = m.activations + 4'000'000;
  plan.product_copy_what = "the merged model";
  const RankMemory with = predict_rank_memory(plan);
  EXPECT_EQ(with.total(), m.total());  // training itself is unchanged
  EXPECT_GT(with.finish_total(), with.total());
  const std::string err = refusal(plan, static_cast<double>(with.total()));
  ASSERT_NE(err, "") << "a run that cannot save its model was accepted";
  EXPECT_NE(err.find("training fits memory.limit_mb"), std::string::npos) << err;
  EXPECT_NE(err.find("the merged model"), std::string::npos) << err;
  EXPECT_NE(err.find("raise memory.limit_mb"), std::string::npos) << err;
  // Enough for the end: accepted.
  EXPECT_EQ(refusal(plan, static_cast<double>(with.finish_total())), "");
  // Too little for training: the training message, as before.
  const std::string small = refusal(plan, static_cast<double>(with.total()) / 2);
  EXPECT_NE(small.find("this configuration needs"), std::string::npos) << small;
}

// ZeRO saves through rank 0 (ZeroParameters::gather_to_root): only rank 0's
// end of run grows, by the other ranks' f32 parameters it does not hold:
// stage 3 every sharded unit's foreign part; mixed precision (any stage)
// also every foreign master weight; fp32 stages 1-2 hold them already.
TEST(memory_limit, zero_counts_the_gather_onto_rank_0) {
  MemoryPlan plan = char6l_plan();
  plan.world = 4;
  const int64_t P = plan.model->layout().numel;
  const int64_t own0 = (P + 3) / 4;
  for (int stage = 1; stage <= 3; ++stage) {
    plan.zero_stage = stage;
    plan.rank = 1;
    EXPECT_EQ(predict_rank_memory(plan).zero_gather, 0) << "stage " << stage << ", rank 1";
    plan.rank = 0;
    const RankMemory m = predict_rank_memory(plan);
    if (stage < 3) {
      EXPECT_EQ(m.zero_gather, 0) << "fp32 stage " << stage;
    } else {
      EXPECT_EQ(m.zero_gather, 4 * (P - own0));  // persist_threshold 0: every unit sharded
      EXPECT_EQ(m.finish_total(), m.model_states() + m.comm + m.workspace + m.zero_gather);
    }
  }
  // Mixed precision, stage 1: the foreign f32 masters (not the f32-read
  // parameters, which each unit's gather brings).
  plan.bytes = StateBytes{2, 4, 12, 2};
  plan.zero_stage = 1;
  const RankMemory mixed = predict_rank_memory(plan);
  EXPECT_GT(mixed.zero_gather, 4 * (P - own0) * 9 / 10);
  EXPECT_LT(mixed.zero_gather, 4 * (P - own0));
  // Without activations to free first, a limit that training fits refuses
  // the end of the run, naming the gather.
  plan.base.activations = 0;
  const RankMemory lean = predict_rank_memory(plan);
  ASSERT_GT(lean.finish_total(), lean.total());
  const std::string err = refusal(plan, static_cast<double>(lean.total()));
  EXPECT_NE(err.find("training fits memory.limit_mb"), std::string::npos) << err;
  EXPECT_NE(err.find("onto rank 0"), std::string::npos) << err;
  EXPECT_EQ(refusal(plan, static_cast<double>(lean.finish_total())), "");
}

// Started from the seed or a file read by range, ZeRO-3 writes only each
// rank's own range (MemoryPlan::setup_own_range): on 64 ranks setup stays
// below the whole model and below training. A file start's reader staging
// (setup_staging) is counted, and when it is what does not fit, the refusal
// says so.
TEST(memory_limit, zero3_setup_from_own_range_holds_no_whole_model) {
  MemoryPlan plan = char6l_plan();
  plan.world = 64;
  plan.zero_stage = 3;
  plan.base.activations = 0;
  plan.rank = 1;
  plan.setup_own_range = true;
  const int64_t P = plan.model->layout().numel;
  const RankMemory m = predict_rank_memory(plan);
  EXPECT_LT(m.setup, P) << "64 ranks: a quarter of the f32 model at most";
  EXPECT_LE(m.setup, m.total());
  EXPECT_EQ(refusal(plan, static_cast<double>(std::max(m.total(), m.finish_total()))), "");
  plan.setup_staging = 8 * P;  // a reader staging more than training holds
  const RankMemory f = predict_rank_memory(plan);
  EXPECT_EQ(f.setup, f.model_states() + 8 * P);
  ASSERT_GT(f.setup, std::max(f.total(), f.finish_total()));
  const std::string err = refusal(plan, static_cast<double>(std::max(f.total(), f.finish_total())));
  EXPECT_NE(err.find("what the init_from reader stages"), std::string::npos) << err;
  EXPECT_EQ(refusal(plan, static_cast<double>(f.setup)), "");
}

// Setup builds the whole f32 model on every rank before ZeRO shards it: on
// many ranks that, not training, is the peak, and more ranks do not lower it.
TEST(memory_limit, zero3_setup_builds_the_whole_model_once) {
  MemoryPlan plan = char6l_plan();
  plan.world = 64;
  plan.zero_stage = 3;
  plan.base.activations = 0;
  plan.rank = 1;  // rank 0's end of run also holds the whole model (the save's gather)
  const int64_t P = plan.model->layout().numel;
  const RankMemory m = predict_rank_memory(plan);
  EXPECT_EQ(m.setup, 4 * P + m.grads);  // fp32: the whole model and the gradient shard
  ASSERT_GT(m.setup, m.total()) << "64 ranks: setup should be the peak";
  ASSERT_GT(m.setup, m.finish_total());
  const std::string err = refusal(plan, static_cast<double>(std::max(m.total(), m.finish_total())));
  EXPECT_NE(err.find("but setup needs"), std::string::npos) << err;
  EXPECT_NE(err.find("raise memory.limit_mb"), std::string::npos) << err;
  EXPECT_EQ(refusal(plan, static_cast<double>(m.setup)), "");
  // Single rank and stages 0-2: setup holds what training holds (no larger).
  plan.zero_stage = 1;
  const RankMemory s1 = predict_rank_memory(plan);
  EXPECT_EQ(s1.setup, std::max(s1.model_states(), 4 * P + s1.grads));
  EXPECT_EQ(s1.setup, s1.model_states());
}
