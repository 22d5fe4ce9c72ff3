// ZeRO equivalence: stages 1, 2 and 3 on N ranks train what stage 0 (one
// rank with N x the micro-batch) trains: every step's loss and validation
// loss within 1e-5 relative, every final parameter tensor within 5e-5
// (dp_harness.h).
// Real processes through `meshtrain train --nproc N` and the shm transport;
// zero.persist_threshold = 0 so that stage 3 gathers every unit (one test
// keeps some units resident). Covers 2, 3 and 4 ranks, gradient accumulation,
// clipping that is active every step, and a parameter count no world size
// divides.
#include <map>

#include "dp_harness.h"

using namespace dp_test;

namespace {

constexpr int kSteps = 20;
constexpr double kTol = 1e-5;  // why 1e-5, and what it measures: dp_harness.h

// A model of 39,865 parameters (odd, not a multiple of 3): C = 35, 5 heads,
// context 15, so shards and units never line up with the world size.
const std::string kOddModel =
    " --set model.n_embd=35 --set model.n_head=5 --set model.seq_len=15";

const RunResult& reference(int mb, int accum, const std::string& extra = "") {
  static std::map<std::string, RunResult> cache;
  const std::string key = std::to_string(mb) + "_" + std::to_string(accum) + extra;
  auto it = cache.find(key);
  if (it == cache.end()) {
    const std::string name = "zref_" + std::to_string(cache.size());
    it = cache.emplace(key, train(name, tiny_settings(kSteps) + " --set train.micro_batch=" +
                                            std::to_string(mb) + " --set train.grad_accum=" +
                                            std::to_string(accum) + extra + " --nproc 1")).first;
  }
  return it->second;
}

RunResult zero_run(const std::string& name, int stage, int n, int mb, int accum,
                   const std::string& extra = "", const std::string& env = "") {
  return train(name, tiny_settings(kSteps) + " --nproc " + std::to_string(n) +
                         " --set zero.stage=" + std::to_string(stage) +
                         " --set zero.persist_threshold=0 --set train.micro_batch=" +
                         std::to_string(mb) + " --set train.grad_accum=" + std::to_string(accum) +
                         extra,
               env.empty() ? "" : "env " + env);
}

}  // namespace

TEST(zero, stage1_2_ranks) {
  // Debug mode checks every collective's fingerprint across ranks.
  RunResult r = zero_run("z1_2", 1, 2, 2, 1, "", "MESHTRAIN_COMM_DEBUG=1");
  EXPECT_NE(r.log.find("ZeRO stage 1: 2 ranks"), std::string::npos) << r.log;
  expect_same_training(r, reference(4, 1), kTol);
}

TEST(zero, stage2_2_ranks) {
  expect_same_training(zero_run("z2_2", 2, 2, 2, 1, "", "MESHTRAIN_COMM_DEBUG=1"), reference(4, 1),
                       kTol);
}

TEST(zero, stage3_2_ranks) {
  expect_same_training(zero_run("z3_2", 3, 2, 2, 1, "", "MESHTRAIN_COMM_DEBUG=1"), reference(4, 1),
                       kTol);
}

// Every stage on 3 and 4 ranks, with gradient accumulation (stages 2 and 3
// reduce every micro-batch into the owner's shard).
TEST(zero, stages_3_ranks_grad_accum) {
  for (int stage = 1; stage <= 3; ++stage) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    expect_same_training(zero_run("z3r_s" + std::to_string(stage), stage, 3, 1, 2),
                         reference(3, 2), kTol);
  }
}

TEST(zero, stages_4_ranks_grad_accum) {
  for (int stage = 1; stage <= 3; ++stage) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    expect_same_training(zero_run("z4r_s" + std::to_string(stage), stage, 4, 1, 2),
                         reference(4, 2), kTol);
  }
}

// A clip far below the gradient norm scales every step: the global norm must
// be summed over the shards.
TEST(zero, clipping_across_shards) {
  const std::string clip = " --set train.clip=0.05";
  for (int stage : {1, 2, 3}) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    RunResult r = zero_run("zclip_s" + std::to_string(stage), stage, 3, 2, 1, clip);
    expect_same_training(r, reference(6, 1, clip), kTol);
    const auto m = r.metrics();
    ASSERT_FALSE(m.empty());
    // Not a tolerance: the clip itself. Measured 1.28 at the last step.
    EXPECT_GT(m.back()["grad_norm"].get<double>(), 0.05) << "clipping was not active";
  }
}

TEST(zero, odd_parameter_count) {
  for (auto [stage, n] : {std::pair{1, 4}, {2, 3}, {3, 2}, {3, 4}}) {
    SCOPED_TRACE("stage " + std::to_string(stage) + " on " + std::to_string(n) + " ranks");
    RunResult r = zero_run("zodd_s" + std::to_string(stage) + "_" + std::to_string(n), stage, n,
                           1, 2, kOddModel);
    EXPECT_NE(r.log.find("39865"), std::string::npos) << r.log;
    expect_same_training(r, reference(n, 2, kOddModel), kTol);
  }
}

// Stage 3 with the embeddings sharded and the layers (3,280 elements) and
// final LayerNorm resident below the threshold.
TEST(zero, stage3_persistent_units) {
  RunResult r = train("z3_persist", tiny_settings(kSteps) + " --nproc 3 --set zero.stage=3 "
                      "--set zero.persist_threshold=4000 --set train.micro_batch=1");
  EXPECT_NE(r.log.find("6592 elements in units under zero.persist_threshold = 4000"),
            std::string::npos) << r.log;
  expect_same_training(r, reference(3, 1), kTol);
}

// Whole-model uses in the middle of stage-3 training (rank 0 samples text and
// writes the model file; every rank gathers first, collectively) leave the
// training unchanged, and every collective still matches across ranks.
TEST(zero, stage3_sampling_and_saving_mid_run) {
  RunResult r = zero_run("z3_sample", 3, 2, 2, 1,
                         " --set train.sample_every=5 --set train.save_every=7",
                         "MESHTRAIN_COMM_DEBUG=1");
  EXPECT_NE(r.log.find("sample:"), std::string::npos) << r.log;
  expect_same_training(r, reference(4, 1), kTol);
}
