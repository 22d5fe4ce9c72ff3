// ZeRO checkpoints: every stage saves the same sharded layout (each rank its
// own range), so a stage-1 checkpoint resumes in stage 3 and a stage-3 one in
// stage 1, on other world sizes (same global batch). The resumed steps and
// the final model must match an uninterrupted single-rank run (losses within
// 1e-5, parameters as dp_harness.h compares them).
#include "dp_harness.h"

using namespace dp_test;

namespace {

constexpr int kSteps = 20;
constexpr double kTol = 1e-5;  // why 1e-5, and what it measures: dp_harness.h

// Steps present in `resumed` have the same loss as in `ref`; the models match.
void expect_continues(const RunResult& resumed, const RunResult& ref, int first_step) {
  ASSERT_EQ(resumed.status, 0) << resumed.log;
  ASSERT_EQ(ref.status, 0) << ref.log;
  const auto a = resumed.metrics(), b = ref.metrics();
  ASSERT_EQ(a.size(), static_cast<size_t>(kSteps - first_step + 1)) << resumed.log;
  for (const auto& row : a) {
    const int step = row["step"];
    ASSERT_GE(step, first_step);
    const double la = row["loss"], lb = b.at(step - 1)["loss"];
    EXPECT_LE(std::abs(la - lb), kTol * std::abs(lb)) << "step " << step;
  }
  expect_same_models(resumed, ref, kTol);
}

RunResult run(const std::string& name, int stage, int n, int mb, const std::string& extra) {
  return train(name, tiny_settings(kSteps) + " --nproc " + std::to_string(n) + " --set zero.stage=" +
                         std::to_string(stage) + " --set zero.persist_threshold=0" +
                         " --set train.micro_batch=" + std::to_string(mb) + extra);
}

const RunResult& reference() {
  static const RunResult r = train("zck_ref", tiny_settings(kSteps) + " --set train.micro_batch=4 --nproc 1");
  return r;
}

std::string ckpt_of(const std::string& run) { return (workdir() / run / "ckpt").string(); }

}  // namespace

TEST(zero, checkpoint_stage1_resumes_in_stage3_on_4_ranks) {
  const std::string save = " --set checkpoint.every=10 --set checkpoint.async=false --set "
                           "checkpoint.resume=never --set checkpoint.dir=" + ckpt_of("zck_s1");
  RunResult a = run("zck_s1", 1, 2, 2, save);
  ASSERT_EQ(a.status, 0) << a.log;
  RunResult b = run("zck_s1_to_s3", 3, 4, 1, " --set checkpoint.resume=" + ckpt_of("zck_s1") +
                                                 "/step_00000010");
  EXPECT_NE(b.log.find("at step 10"), std::string::npos) << b.log;
  expect_continues(b, reference(), 11);
}

TEST(zero, checkpoint_stage3_resumes_in_stage1_on_2_ranks) {
  const std::string save = " --set checkpoint.every=10 --set checkpoint.async=false --set "
                           "checkpoint.resume=never --set checkpoint.dir=" + ckpt_of("zck_s3");
  RunResult a = run("zck_s3", 3, 4, 1, save);
  ASSERT_EQ(a.status, 0) << a.log;
  RunResult b = run("zck_s3_to_s1", 1, 2, 2, " --set checkpoint.resume=" + ckpt_of("zck_s3") +
                                                 "/step_00000010");
  EXPECT_NE(b.log.find("at step 10"), std::string::npos) << b.log;
  expect_continues(b, reference(), 11);
  // And into stage 2 on 3 ranks... (global batch 4 does not split over 3 ranks;
  // stage 2 on 4 ranks instead).
  RunResult c = run("zck_s3_to_s2", 2, 4, 1, " --set checkpoint.resume=" + ckpt_of("zck_s3") +
                                                 "/step_00000010");
  expect_continues(c, reference(), 11);
}
