// The calibration's fits and the train-time prediction built on them: the
// GEMM curve recovered from rates that follow it, the traffic constant
// solved from a reference step, engine models read back as planner shapes,
// and a run's predicted step responding to its layout as the model says
// (more data-parallel ranks, recompute, threads, every:K).
#include <gtest/gtest.h>

#include <cmath>

#include "meshtrain/core/error.h"
#include "meshtrain/nn/gpt_spec.h"
#include "meshtrain/nn/llama_spec.h"
#include "meshtrain/nn/lora_spec.h"
#include "meshtrain/nn/model_registry.h"
#include "meshtrain/plan/calibration_fit.h"
#include "meshtrain/train/step_time_prediction.h"

using namespace meshtrain;
using namespace meshtrain::plan;

namespace {

TEST(plan_calibration, gemm_curve_fit_recovers_peak_and_half_size) {
  std::vector<RatePoint> points;
  for (double n : {32.0, 64.0, 128.0, 512.0, 1024.0}) points.push_back({n, 120.0 * n / (n + 48.0)});
  const GemmCurve c = fit_gemm_curve(points);
  // Points exactly on the line 1/r = 1/peak + (h/peak)(1/n): least squares
  // recovers it to double rounding times the normal equations' conditioning
  // (1/n spans 32x), ~1e-13. Measured 2.8e-14 (peak), 1.4e-14 (h); was 1e-6.
  EXPECT_NEAR(c.peak_gflops, 120.0, 1e-9);
  EXPECT_NEAR(c.half_dim, 48.0, 1e-9);
  // Rates that fall with size (a cache effect) give no curve: the best rate, flat.
  const GemmCurve flat = fit_gemm_curve({{64, 100}, {128, 90}, {256, 80}});
  EXPECT_DOUBLE_EQ(flat.peak_gflops, 100);
  EXPECT_DOUBLE_EQ(flat.half_dim, 0);
  // One large GEMM read slow (another process on the core) does not flatten
  // the curve: rates never fall with n, so the reading is raised to the best
  // below it.
  std::vector<RatePoint> busy = points;
  busy.back().gflops /= 2;
  const GemmCurve b = fit_gemm_curve(busy);
  // Raising the slow reading biases the fit but keeps its shape: h within
  // 50% of 48, peak within -17%/+8% of 120, while a flattened fit (h = 0) or
  // the halved reading (peak ~60) falls outside. Measured h 46.3, peak 117.8.
  EXPECT_GT(b.half_dim, 24.0);
  EXPECT_LT(b.half_dim, 72.0);
  EXPECT_GT(b.peak_gflops, 100.0);
  EXPECT_LT(b.peak_gflops, 130.0);
  EXPECT_THROW(fit_gemm_curve({{64, 100}}), Error);
  EXPECT_THROW(fit_gemm_curve({{64, 100}, {64, 90}}), Error);
  EXPECT_THROW(fit_gemm_curve({{64, 100}, {0, 90}}), Error);
}

TEST(plan_calibration, traffic_fit_solves_the_linear_model) {
  // 0.35 / 0.1 from inputs not exact in binary: a few ulp of 3.5 (measured
  // 2.2e-15).
  EXPECT_NEAR(fit_traffic(1.0, 1.1, 1.35), 3.5, 1e-12);
  EXPECT_DOUBLE_EQ(fit_traffic(1.0, 1.1, 0.9), 0.0);  // faster than GEMMs alone: no traffic term
  EXPECT_THROW(fit_traffic(1.0, 1.0, 2.0), Error);
}

TEST(plan_calibration, engine_models_read_back_as_planner_shapes) {
  for (const char* name : {"char-6L", "llama-char"}) {
    const auto spec = model_preset(name);
    const auto shape = shape_from_description(spec->to_json());
    ASSERT_TRUE(shape) << name;
    EXPECT_EQ(shape->params(), spec->num_params()) << name;  // unpadded vocabularies
  }
  LoraConfig lc;
  lc.rank = 4;
  EXPECT_FALSE(shape_from_description(LoraSpec::make(model_preset("char-6L"), lc)->to_json()));
}

ClusterSpec machine() {
  ClusterSpec m;
  m.name = "test-machine";
  m.memory_gb = 16;
  m.bf16_tflops = 0.2;
  m.fp32_tflops = 0.1;
  m.gemm_peak_fraction = 1;
  m.gemm_half_dim = 10;
  m.activation_traffic = 5;
  m.link_efficiency = 1;
  m.memory_gbps = 20;
  m.intra_gbps = m.inter_gbps = 10;
  m.threads_per_device = 1;
  return m;
}

TEST(plan_calibration, predicted_step_follows_the_run_layout) {
  const auto spec = model_preset("char-6L");
  RunLayout run;
  run.micro_batch = 4;
  run.seq = spec->seq_len();
  std::string why;
  const auto one = predict_step_time(*spec, run, machine(), why);
  ASSERT_TRUE(one) << why;
  // Model FLOPs at the fitted GEMM rate are most of the step on this machine:
  // at least FLOPs / peak, and the curve's (n + 10) / n slowdown plus the
  // memory-bound traffic stay under 1.5x. Measured 1.09x.
  const double flops = spec->flops_per_token(run.seq) * run.micro_batch * run.seq;
  EXPECT_GT(one->time.compute, flops / 0.1e12);
  EXPECT_LT(one->time.compute, 1.5 * flops / 0.1e12);
  // Two data-parallel ranks, the same micro-batch each: the same compute,
  // plus a reduction that overlaps backward.
  RunLayout dp = run;
  dp.dp = 2;
  const auto two = predict_step_time(*spec, dp, machine(), why);
  EXPECT_DOUBLE_EQ(two->time.compute, one->time.compute);
  EXPECT_GT(two->time.dp_total, 0);
  EXPECT_LT(two->time.dp_exposed, two->time.dp_total);
  // comm.grad_dtype = bf16: the reduction moves half the bytes; only the
  // per-message latency does not halve, hence 0.4-0.6. Measured 0.5007.
  RunLayout wire = dp;
  wire.grad_wire_bytes = 2;
  const auto half_wire = predict_step_time(*spec, wire, machine(), why);
  EXPECT_LT(half_wire->time.dp_reduce, 0.6 * two->time.dp_reduce);
  EXPECT_GT(half_wire->time.dp_reduce, 0.4 * two->time.dp_reduce);
  // Ranks that slow each other down (concurrent_slowdown): a 2-rank run's
  // compute and update take that much longer, a 1-rank run's do not.
  ClusterSpec crowded = machine();
  crowded.concurrent_slowdown = 1.25;
  EXPECT_DOUBLE_EQ(predict_step_time(*spec, run, crowded, why)->time.compute, one->time.compute);
  const auto two_crowded = predict_step_time(*spec, dp, crowded, why);
  // These and the recompute and thread ratios below are products and
  // quotients of the same doubles (times under 1 s): a few roundings,
  // ~1e-16, which 1e-12 (1e-9 for a sum of parts) absorbs. Measured equal.
  EXPECT_NEAR(two_crowded->time.compute, 1.25 * two->time.compute, 1e-12);
  EXPECT_NEAR(two_crowded->time.optimizer, 1.25 * two->time.optimizer, 1e-12);
  // Full recompute re-runs a forward: a third of forward + backward.
  RunLayout full = run;
  full.recompute = Recompute::full();
  EXPECT_NEAR(predict_step_time(*spec, full, machine(), why)->time.recompute, one->time.compute / 3, 1e-12);
  // every:3 over 6 layers re-runs blocks 0 and 3: a third of that.
  RunLayout every = run;
  every.recompute = Recompute::every_k(3);
  EXPECT_NEAR(predict_step_time(*spec, every, machine(), why)->time.recompute, one->time.compute / 9, 1e-12);
  // Twice the threads per rank: rates scale, the step halves.
  RunLayout threads = run;
  threads.threads_per_rank = 2;
  EXPECT_NEAR(predict_step_time(*spec, threads, machine(), why)->step_s(), one->step_s() / 2, 1e-9);
  // bf16 runs its GEMMs at the bf16 rate: faster.
  RunLayout bf16 = run;
  bf16.precision = Precision::BF16;
  EXPECT_LT(predict_step_time(*spec, bf16, machine(), why)->time.compute, one->time.compute);
  // Tensor parallelism halves each rank's GEMMs and adds blocking collectives;
  // 0.6 leaves room for the work tp does not split. Measured 0.52.
  RunLayout tp = run;
  tp.tp = 2;
  const auto tp2 = predict_step_time(*spec, tp, machine(), why);
  EXPECT_LT(tp2->time.compute, 0.6 * one->time.compute);
  EXPECT_GT(tp2->time.tp_comm, 0);
  // Pipelines: each stage about half the layers (the last also the head, so
  // 0.5-0.6); the bubble (pp - 1) / m of the stage's work, divided by the
  // chunks when interleaved; sends both ways per micro-batch.
  RunLayout pipe = run;
  pipe.pp = 2;
  pipe.grad_accum = 8;
  RunLayout whole = run;
  whole.grad_accum = 8;
  const auto pp2 = predict_step_time(*spec, pipe, machine(), why);
  const auto acc8 = predict_step_time(*spec, whole, machine(), why);
  ASSERT_TRUE(pp2 && acc8) << why;
  EXPECT_GT(pp2->time.compute, 0.5 * acc8->time.compute);
  EXPECT_LT(pp2->time.compute, 0.6 * acc8->time.compute);
  EXPECT_NEAR(pp2->time.bubble, pp2->time.compute / 8, 1e-12);
  EXPECT_GT(pp2->time.pp_comm, 0);
  pipe.chunks = 2;
  const auto interleaved = predict_step_time(*spec, pipe, machine(), why);
  EXPECT_NEAR(interleaved->time.bubble, interleaved->time.compute / 16, 1e-12);
  EXPECT_GT(interleaved->time.pp_comm, pp2->time.pp_comm);
}

TEST(plan_calibration, no_machine_file_or_lora_says_why) {
  setenv("MESHTRAIN_MACHINE_FILE", "/nonexistent/machine.json", 1);
  const auto spec = model_preset("char-6L");
  RunLayout run;
  run.seq = spec->seq_len();
  std::string why;
  EXPECT_FALSE(predict_step_time(*spec, run, why));
  EXPECT_NE(why.find("meshtrain plan --calibrate"), std::string::npos) << why;
  LoraConfig lc;
  lc.rank = 4;
  EXPECT_FALSE(predict_step_time(*LoraSpec::make(spec, lc), run, machine(), why));
  EXPECT_NE(why.find("lora"), std::string::npos) << why;
}

}  // namespace
