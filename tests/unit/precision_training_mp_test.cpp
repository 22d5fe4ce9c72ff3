// Mixed-precision training end to end through `meshtrain train` (real
// processes): bf16 and fp16 track the f32 loss curve on the synthetic
// grammar, on 1 and 2 ranks; a forced fp16 overflow on one rank makes every
// rank skip the same step and halve the scale; the loss scaler's state
// survives a checkpoint resume; ZeRO and the bf16 gradient reduction compose
// with mixed precision.
//
// Stated tolerances (measured: per-step max 0.4%, mean 0.04%, validation
// 0.03% for both precisions on this setup): every step's loss within 2%
// relative of the f32 run's, the mean relative difference under 0.3%, and the
// validation losses within 0.5%.
#include <map>

#include "dp_harness.h"

using namespace dp_test;

namespace {

constexpr int kSteps = 100;

// char-2L (C=128, 0.44M parameters) at context 64: big enough that 16-bit
// rounding shows, small enough for a few seconds per run.
std::string settings(int steps, int micro_batch) {
  const std::string data = (workdir() / "data").string();
  return " --set model.preset=char-2L --set model.seq_len=64 --set data.train='" + data +
         "/train_*.bin' --set data.val='" + data + "/val_*.bin' --set train.steps=" +
         std::to_string(steps) + " --set train.warmup=10 --set train.lr=2e-3 --set train.threads=1"
         " --set train.eval_every=50 --set train.eval_batches=4 --set checkpoint.resume=never"
         " --set train.micro_batch=" + std::to_string(micro_batch);
}

const RunResult& f32_reference() {
  static const RunResult r = train("f32_ref", settings(kSteps, 8) + " --set precision=fp32");
  return r;
}

void expect_tracks(const RunResult& run, const RunResult& ref, double step_tol, double mean_tol,
                   double val_tol) {
  ASSERT_EQ(run.status, 0) << run.log;
  ASSERT_EQ(ref.status, 0) << ref.log;
  const auto a = run.metrics(), b = ref.metrics();
  ASSERT_EQ(a.size(), b.size());
  ASSERT_FALSE(a.empty());
  double sum = 0;
  int vals = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double la = a[i]["loss"], lb = b[i]["loss"];
    const double rel = std::abs(la - lb) / std::abs(lb);
    sum += rel;
    EXPECT_LE(rel, step_tol) << "step " << i + 1 << ": " << la << " vs f32 " << lb;
    if (a[i].contains("val_loss") && b[i].contains("val_loss")) {
      const double va = a[i]["val_loss"], vb = b[i]["val_loss"];
      EXPECT_LE(std::abs(va - vb), val_tol * vb) << "val loss at step " << i + 1;
      ++vals;
    }
  }
  EXPECT_LE(sum / a.size(), mean_tol);
  EXPECT_EQ(vals, 2);
  // Learned something: the last loss is far below the first.
  EXPECT_LT(static_cast<double>(a.back()["loss"]), 0.5 * static_cast<double>(a.front()["loss"]));
}

}  // namespace

TEST(precision, bf16_and_fp16_track_fp32_loss_curve) {
  const RunResult bf = train("bf16_1", settings(kSteps, 8) + " --set precision=bf16");
  const RunResult hf = train("fp16_1", settings(kSteps, 8) + " --set precision=fp16");
  expect_tracks(bf, f32_reference(), 2e-2, 3e-3, 5e-3);
  expect_tracks(hf, f32_reference(), 2e-2, 3e-3, 5e-3);
  EXPECT_NE(bf.log.find("precision: bf16 mixed"), std::string::npos) << bf.log;
  EXPECT_NE(hf.log.find("dynamic loss scale 65536"), std::string::npos) << hf.log;
  EXPECT_EQ(hf.log.find("overflowed"), std::string::npos) << hf.log;
  // The allocator's peaks equal the prediction (train/memory_model.h): the
  // 16-bit weight copy, 16-bit activations, fp16's widening scratch.
  for (const RunResult* r : {&bf, &hf}) {
    const auto mem = nlohmann::json::parse(slurp((r->dir / "memory.json").string()));
    for (const char* cat : {"parameters", "gradients", "optimizer", "activations", "workspace"})
      EXPECT_EQ(mem[0]["peak"][cat].get<double>(), mem[0]["predicted"][cat].get<double>())
          << r->dir << " " << cat;
  }
  const auto m32 = nlohmann::json::parse(slurp((f32_reference().dir / "memory.json").string()));
  const auto m16 = nlohmann::json::parse(slurp((bf.dir / "memory.json").string()));
  EXPECT_EQ(m16[0]["peak"]["parameters"].get<double>(), 1.5 * m32[0]["peak"]["parameters"].get<double>());
  EXPECT_LT(m16[0]["peak"]["activations"].get<double>(), m32[0]["peak"]["activations"].get<double>());
}

TEST(precision, bf16_and_fp16_track_fp32_loss_curve_2_ranks) {
  const RunResult bf = train("bf16_2", settings(kSteps, 4) + " --set precision=bf16 --nproc 2");
  const RunResult hf = train("fp16_2", settings(kSteps, 4) + " --set precision=fp16 --nproc 2");
  expect_tracks(bf, f32_reference(), 2e-2, 3e-3, 5e-3);
  expect_tracks(hf, f32_reference(), 2e-2, 3e-3, 5e-3);
}

// Rank 1 alone finds an inf in its (already reduced) gradient at step 6; the
// skip decision comes from the reduced flag, so rank 0 skips too: the
// replicas stay identical (MESHTRAIN_DEBUG checks their checksum at the end),
// and the run matches a 1-rank run that overflowed at the same step.
TEST(precision, forced_overflow_skips_the_same_step_on_every_rank) {
  const std::string s = settings(20, 4) + " --set precision=fp16 --set train.eval_every=0";
  const RunResult two = train("inject_2", s + " --nproc 2",
                              "env MESHTRAIN_DEBUG=1 MESHTRAIN_TEST_INJECT_INF=5:1");
  ASSERT_EQ(two.status, 0) << two.log;
  EXPECT_NE(two.log.find("step 6: fp16 gradients overflowed at loss scale 65536; update skipped, "
                         "loss scale now 32768"), std::string::npos) << two.log;
  const auto m = two.metrics();
  ASSERT_EQ(m.size(), 20u);
  for (size_t i = 0; i < m.size(); ++i) EXPECT_EQ(m[i]["skipped"].get<bool>(), i == 5) << i;
  const RunResult one = train("inject_1", settings(20, 8) + " --set precision=fp16 "
                              "--set train.eval_every=0", "env MESHTRAIN_TEST_INJECT_INF=5:0");
  ASSERT_EQ(one.status, 0) << one.log;
  const auto r = one.metrics();
  ASSERT_EQ(r.size(), m.size());
  for (size_t i = 0; i < m.size(); ++i)
    EXPECT_NEAR(m[i]["loss"].get<double>(), r[i]["loss"].get<double>(), 1e-3 * r[i]["loss"].get<double>()) << i;
  // A run that never overflows differs after step 6 (the skip is real).
  const RunResult clean = train("inject_none", s + " --nproc 2");
  ASSERT_EQ(clean.status, 0) << clean.log;
  EXPECT_NE(clean.metrics()[6]["loss"].get<double>(), m[6]["loss"].get<double>());
}

// The scale halved before a checkpoint is the scale after resuming: a second
// forced overflow after the resume starts from 32768, not the initial 65536.
TEST(precision, loss_scaler_state_survives_checkpoint_resume) {
  const std::string s = settings(10, 4) + " --set precision=fp16 --set train.eval_every=0"
                        " --set checkpoint.every=5 --set checkpoint.async=false";
  const RunResult first = train("scaler_resume", s, "env MESHTRAIN_TEST_INJECT_INF=2 "
                                "MESHTRAIN_TEST_CRASH_AFTER_STEP=5");
  ASSERT_NE(first.status, 0) << "the run should stop after step 5\n" << first.log;
  EXPECT_NE(first.log.find("step 3: fp16 gradients overflowed at loss scale 65536"),
            std::string::npos) << first.log;
  const nlohmann::json index = nlohmann::json::parse(
      slurp((first.dir / "ckpt" / "step_00000005" / "index.json").string()));
  ASSERT_TRUE(index["loss_scaler"].is_object()) << index.dump();
  EXPECT_EQ(index["loss_scaler"]["scale"].get<double>(), 32768.0);
  EXPECT_EQ(index["loss_scaler"]["skipped_steps"].get<int64_t>(), 1);
  // Resume into the same run folder (checkpoint.dir = <telemetry.dir>/ckpt).
  RunResult second;
  second.dir = first.dir;
  const std::string log = (workdir() / "scaler_resume2.log").string();
  const std::string cmd = "env MESHTRAIN_TEST_INJECT_INF=7 timeout 180 " + binary() + " train " +
                          s + " --set checkpoint.resume=auto --set telemetry.dir=" +
                          first.dir.string() + " >" + log + " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << slurp(log);
  second.log = slurp(log);
  EXPECT_NE(second.log.find("resumed from"), std::string::npos) << second.log;
  EXPECT_NE(second.log.find("step 8: fp16 gradients overflowed at loss scale 32768; update "
                            "skipped, loss scale now 16384"), std::string::npos) << second.log;
}

// ZeRO stages 1 and 3 and the bf16 gradient reduction under mixed precision
// track the plain data-parallel runs. bf16 rounding amplifies the f32
// reduction-order differences, most at a loss spike: over seeds 1-5 at the
// avx2 and avx512 levels, ZeRO-3 against data parallelism measured up to
// 1.03% at one step (a spike at step 18) and at most 0.14% over the mean of
// the last five steps. So each step is held to 2% and the last five steps'
// mean to 0.5%.
TEST(precision, zero_and_bf16_reduction_compose_with_mixed_precision) {
  const std::string s = settings(30, 4) + " --set train.eval_every=0 --nproc 2";
  const RunResult dp = train("mix_dp", s + " --set precision=bf16");
  const RunResult z1 = train("mix_z1", s + " --set precision=bf16 --set zero.stage=1");
  const RunResult z3 = train("mix_z3", s + " --set precision=bf16 --set zero.stage=3 "
                                           "--set zero.persist_threshold=0");
  const RunResult f32 = train("mix_f32", s);
  const RunResult red = train("mix_bf16_reduce", s + " --set comm.grad_dtype=bf16");
  for (const RunResult* r : {&dp, &z1, &z3, &f32, &red}) ASSERT_EQ(r->status, 0) << r->log;
  auto close = [](const RunResult& a, const RunResult& b, double step_tol, double tail_tol) {
    const auto x = a.metrics(), y = b.metrics();
    ASSERT_EQ(x.size(), y.size());
    ASSERT_GE(x.size(), 5u);
    double tail_x = 0, tail_y = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const double lx = x[i]["loss"].get<double>(), ly = y[i]["loss"].get<double>();
      EXPECT_NEAR(lx, ly, step_tol * ly) << a.dir << " step " << i + 1;
      if (i + 5 >= x.size()) tail_x += lx, tail_y += ly;
    }
    EXPECT_NEAR(tail_x, tail_y, tail_tol * tail_y) << a.dir << " mean of the last five steps";
  };
  close(z1, dp, 2e-2, 5e-3);
  close(z3, dp, 2e-2, 5e-3);
  // Model-state bytes per rank equal the formulas: stage 0 the f32
  // parameters and the 16-bit copy whole; ZeRO the f32 master shard in the
  // optimizer state and the 16-bit copy whole (stage 1) or sharded (stage 3).
  for (const RunResult* r : {&dp, &z1, &z3}) {
    const auto mem = nlohmann::json::parse(slurp((r->dir / "memory.json").string()));
    ASSERT_EQ(mem.size(), 2u);
    for (const auto& rank : mem)
      for (const char* cat : {"parameters", "gradients", "optimizer"})
        EXPECT_EQ(rank["peak"][cat].get<double>(), rank["predicted"][cat].get<double>())
            << r->dir << " rank " << rank["rank"] << " " << cat;
  }
  close(red, f32, 1e-2, 5e-3);
  // The bf16 reduction really ran in bf16: not bit-identical to f32.
  EXPECT_NE(red.metrics().back()["loss"].get<double>(), f32.metrics().back()["loss"].get<double>());
}
