// SGD (Nesterov), LARS and LAMB in training: on 2 ranks, replicated and ZeRO
// 1-3, they train what one rank with twice the micro-batch trains (losses
// within 1e-5, parameters as dp_harness.h compares them). ZeRO's per-layer
// norms, summed from the pieces each rank's range holds, equal replicated
// data parallelism's bit for bit (the same slots added in the same order,
// optim/tensor_norms.h), so ZeRO-1, whose gradients are the replicated run's,
// writes the identical model file. Under tensor parallelism the split
// layers' norms are the whole layer's; two pipeline stages train what one
// rank trains. A checkpoint carries the optimizer's own state to another
// ZeRO stage, and resuming it with another optimizer is refused with the
// reason. Real processes through `meshtrain train --nproc N`.
#include <map>

#include "dp_harness.h"

using namespace dp_test;

namespace {

constexpr int kSteps = 20;
constexpr double kTol = 1e-5;  // why 1e-5, and what it measures: dp_harness.h

// Each optimizer at a learning rate that trains this model in 20 steps:
// LARS's layer rate is lr x trust_coefficient x ||w|| / ||g||, LAMB's step
// moves each layer by lr x ||w|| (small at GPT's 0.02 initialization).
std::string optimizer_settings(const std::string& opt) {
  if (opt == "sgd")
    return " --set train.optimizer=sgd --set train.lr=0.1 --set train.nesterov=true"
           " --set train.weight_decay=1e-4";
  if (opt == "lars")
    return " --set train.optimizer=lars --set train.lr=2 --set train.trust_coefficient=0.02"
           " --set train.weight_decay=1e-4";
  return " --set train.optimizer=lamb --set train.lr=0.1 --set train.weight_decay=0.01";
}

RunResult run(const std::string& name, const std::string& opt, int n, int stage, int mb,
              const std::string& extra = "") {
  return train(name, tiny_settings(kSteps) + optimizer_settings(opt) + " --nproc " +
                         std::to_string(n) + " --set zero.stage=" + std::to_string(stage) +
                         " --set zero.persist_threshold=0 --set train.micro_batch=" +
                         std::to_string(mb) + extra);
}

const RunResult& reference(const std::string& opt) {
  static std::map<std::string, RunResult> cache;
  auto it = cache.find(opt);
  if (it == cache.end()) it = cache.emplace(opt, run(opt + "_ref", opt, 1, 0, 4)).first;
  return it->second;
}

void expect_identical_runs(const RunResult& a, const RunResult& b) {
  const auto ma = a.metrics(), mb = b.metrics();
  ASSERT_EQ(ma.size(), mb.size());
  for (size_t i = 0; i < ma.size(); ++i)
    EXPECT_EQ(ma[i]["loss"].get<double>(), mb[i]["loss"].get<double>()) << "step " << i + 1;
  const bool same = slurp((a.dir / "model.safetensors").string()) ==
                    slurp((b.dir / "model.safetensors").string());
  EXPECT_TRUE(same) << a.dir.filename() << " and " << b.dir.filename() << " wrote different models";
}

// 2 ranks replicated, then ZeRO 1, 2, 3: each the single rank's training.
// Stage 1 reduces the gradients with the replicated run's allreduce, so any
// difference there would be the optimizer's: its sharded per-layer norms
// must give the replicated run's bits. Stages 2 and 3 reduce-scatter (sums
// in another order), so they match within the tolerance only.
void check_on_two_ranks(const std::string& opt) {
  const RunResult& ref = reference(opt);
  ASSERT_EQ(ref.status, 0) << ref.log;
  const RunResult dp = run(opt + "_dp2", opt, 2, 0, 2);
  expect_same_training(dp, ref, kTol);
  // The loss must move: an optimizer that did nothing would match too.
  const auto m = ref.metrics();
  EXPECT_LT(m.back()["loss"].get<double>(), 0.9 * m.front()["loss"].get<double>());
  for (int stage = 1; stage <= 3; ++stage) {
    SCOPED_TRACE("zero stage " + std::to_string(stage));
    const RunResult z = run(opt + "_z" + std::to_string(stage), opt, 2, stage, 2);
    expect_same_training(z, ref, kTol);
    if (stage == 1) expect_identical_runs(z, dp);
  }
}

std::string ckpt_of(const std::string& run) { return (workdir() / run / "ckpt").string(); }

}  // namespace

TEST(optimizers, nesterov_sgd_on_2_ranks_and_zero_1_2_3) { check_on_two_ranks("sgd"); }

TEST(optimizers, lars_on_2_ranks_and_zero_1_2_3) { check_on_two_ranks("lars"); }

TEST(optimizers, lamb_on_2_ranks_and_zero_1_2_3) { check_on_two_ranks("lamb"); }

TEST(optimizers, lars_and_lamb_layer_norms_under_tensor_parallelism) {
  for (const std::string opt : {"lars", "lamb"}) {
    SCOPED_TRACE(opt);
    const RunResult tp = run(opt + "_tp2", opt, 2, 0, 4, " --set parallel.tp=2");
    expect_same_training(tp, reference(opt), kTol);
  }
}

// Two pipeline stages (tiny GPT: one layer each, the tied embedding on
// both): each stage's layers are whole on it, so its norms need no exchange.
TEST(optimizers, sgd_lars_and_lamb_on_two_pipeline_stages) {
  for (const std::string opt : {"sgd", "lars", "lamb"}) {
    SCOPED_TRACE(opt);
    const RunResult pp = run(opt + "_pp2", opt, 2, 0, 4, " --set parallel.pp=2");
    expect_same_training(pp, reference(opt), kTol);
  }
}

TEST(optimizers, checkpoint_carries_state_and_refuses_another_optimizer) {
  const std::string save = " --set checkpoint.every=10 --set checkpoint.async=false --set "
                           "checkpoint.resume=never --set checkpoint.dir=" + ckpt_of("lamb_ck");
  const RunResult a = run("lamb_ck", "lamb", 2, 1, 2, save);
  ASSERT_EQ(a.status, 0) << a.log;
  const std::string step10 = " --set checkpoint.resume=" + ckpt_of("lamb_ck") + "/step_00000010";
  const RunResult b = run("lamb_ck_z3", "lamb", 2, 3, 2, step10);
  ASSERT_EQ(b.status, 0) << b.log;
  const auto resumed = b.metrics(), ref = reference("lamb").metrics();
  ASSERT_EQ(resumed.size(), static_cast<size_t>(kSteps - 10));
  for (const auto& row : resumed) {
    const int step = row["step"];
    const double la = row["loss"], lb = ref.at(step - 1)["loss"];
    EXPECT_LE(std::abs(la - lb), kTol * std::abs(lb)) << "step " << step;
  }
  expect_same_models(b, reference("lamb"), kTol);
  const RunResult c = run("lamb_ck_sgd", "sgd", 2, 1, 2, step10);
  EXPECT_NE(c.status, 0);
  EXPECT_NE(c.log.find("state of the lamb optimizer"), std::string::npos) << c.log;
  EXPECT_NE(c.log.find("resuming with another optimizer is refused"), std::string::npos) << c.log;
}
