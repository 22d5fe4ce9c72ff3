// The planner's step-time model against published end-to-end measurements
// on A100-80GB clusters (DGX A100 nodes of 8, NVLink inside, 8 x 200 Gb/s
// HDR InfiniBand across), with the same constants for every row:
//  - Narayanan et al. 2021, "Efficient Large-Scale Language Model Training
//    on GPU Clusters Using Megatron-LM" (arXiv 2104.04473), Table 1: GPT
//    models 1.7B-1T (V 51200, s 2048), their tp, pp, GPUs and batch, full
//    activation recomputation, the achieved teraFLOP/s per GPU counted by
//    their Eq. 3, 96 B s l h^2 (1 + s / (6h) + V / (16 l h)).
//  - Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
//    Transformer Models" (arXiv 2205.05198), Tables 3 and 5: 22B, 175B,
//    530B and 1T, iteration time with full recomputation and with
//    selective recomputation + sequence parallelism.
// For each row the planner gets the paper's model, GPU count, batch, tp,
// pp and recompute mode, no ZeRO (neither paper shards optimizer states)
// and Megatron-LM's overlap and kernel rules (EngineTraits::megatron_2021:
// no data-parallel overlap, full-square attention scores); it chooses the
// micro-batch, which the tables do not print, and its best predicted step
// is compared with the published figure. The tables do not print the
// pipeline schedule either (530B's 3 layers per stage cannot be
// interleaved): the rows are predicted with plain 1F1B. Targets (issue 17):
// every row within 10%, the median within 5%. The two papers measured
// 530B with pp 35 a year apart, 10% apart per pipeline; the model sits
// between them.
// test-links: mt_plan
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "meshtrain/plan/planner.h"

using namespace meshtrain::plan;

namespace {

struct PublishedRun {
  const char* source;
  const char* model;  // a planner preset
  int64_t tp, pp, gpus, batch;
  RecomputePolicy recompute;
  bool sequence_parallel;
  double published;  // Narayanan: TFLOP/s per GPU; Korthikanti: seconds per iteration
};

constexpr auto kFull = RecomputePolicy::Full;
constexpr auto kSelective = RecomputePolicy::Selective;

const PublishedRun kNarayananTable1[] = {
    {"Narayanan T1", "gpt-1.7b", 1, 1, 32, 512, kFull, false, 137},
    {"Narayanan T1", "gpt-3.6b", 2, 1, 64, 512, kFull, false, 138},
    {"Narayanan T1", "gpt-7.5b", 4, 1, 128, 512, kFull, false, 142},
    {"Narayanan T1", "gpt-18b", 8, 1, 256, 1024, kFull, false, 135},
    {"Narayanan T1", "gpt-39b", 8, 2, 512, 1536, kFull, false, 138},
    {"Narayanan T1", "gpt-76b", 8, 4, 1024, 1792, kFull, false, 140},
    {"Narayanan T1", "gpt-146b", 8, 8, 1536, 2304, kFull, false, 148},
    {"Narayanan T1", "gpt-310b", 8, 16, 1920, 2160, kFull, false, 155},
    {"Narayanan T1", "gpt-530b", 8, 35, 2520, 2520, kFull, false, 163},
    {"Narayanan T1", "gpt-1t", 8, 64, 3072, 3072, kFull, false, 163},
};

const PublishedRun kKorthikantiTable5[] = {
    {"Korthikanti T5 full", "gpt-22b", 8, 1, 8, 4, kFull, false, 1.42},
    {"Korthikanti T5 full", "gpt-175b", 8, 8, 64, 64, kFull, false, 18.13},
    {"Korthikanti T5 full", "gpt-530b", 8, 35, 280, 280, kFull, false, 49.05},
    {"Korthikanti T5 full", "gpt-1t", 8, 64, 512, 512, kFull, false, 94.42},
    {"Korthikanti T5 sel+sp", "gpt-22b", 8, 1, 8, 4, kSelective, true, 1.10},
    {"Korthikanti T5 sel+sp", "gpt-175b", 8, 8, 64, 64, kSelective, true, 13.75},
    {"Korthikanti T5 sel+sp", "gpt-530b", 8, 35, 280, 280, kSelective, true, 37.83},
    {"Korthikanti T5 sel+sp", "gpt-1t", 8, 64, 512, 512, kSelective, true, 71.49},
};

PlanRow best_for(const PublishedRun& run) {
  PlanRequest r;
  r.model = *shape_preset(run.model);
  r.cluster = ClusterSpec::load("a100-80gb");
  r.gpus = run.gpus;
  r.global_batch = run.batch;
  r.fixed.tp = run.tp;
  r.fixed.pp = run.pp;
  r.fixed.recompute = run.recompute;
  r.fixed.sequence_parallel = run.sequence_parallel;
  r.fixed.zero_stage = 0;
  r.fixed.chunks = 1;
  r.engine = EngineTraits::megatron_2021();
  const PlanResult res = make_plan(r);
  EXPECT_FALSE(res.rows.empty()) << run.source << " " << run.model << ": nothing fits";
  return res.rows.empty() ? res.smallest : res.rows.front();
}

// Narayanan's Eq. 3 FLOPs of one iteration (counting the recomputed forward).
double narayanan_flops(const TransformerShape& m, double batch) {
  const double s = static_cast<double>(m.seq), l = static_cast<double>(m.layers);
  const double h = static_cast<double>(m.hidden), v = static_cast<double>(m.vocab);
  return 96.0 * batch * s * l * h * h * (1.0 + s / (6.0 * h) + v / (16.0 * l * h));
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// The targets are accuracy goals, not numerics: the papers' own repeated
// measurement (530B, pp 35) differs by 10%. Measured: Narayanan worst +6.4%
// (76B), median 2.8%; Korthikanti worst +8.4% (530B, full recompute),
// median 4.45%, close to its 5% target.
void expect_within_targets(const std::vector<double>& errors, const std::string& table) {
  double worst = 0;
  for (double e : errors) worst = std::max(worst, std::fabs(e));
  std::vector<double> abs_errors;
  for (double e : errors) abs_errors.push_back(std::fabs(e));
  EXPECT_LE(worst, 0.10) << table << ": the worst row is off by " << worst * 100 << "%";
  EXPECT_LE(median(abs_errors), 0.05) << table << ": median error " << median(abs_errors) * 100 << "%";
}

TEST(plan_published, narayanan_table_1_teraflops_per_gpu) {
  std::vector<double> errors;
  for (const PublishedRun& run : kNarayananTable1) {
    const PlanRow row = best_for(run);
    const TransformerShape m = *shape_preset(run.model);
    const double tflops = narayanan_flops(m, static_cast<double>(run.batch)) / row.time.step() /
                          static_cast<double>(run.gpus) / 1e12;
    const double error = tflops / run.published - 1;
    errors.push_back(error);
    std::printf("%-13s %-9s tp %lld pp %3lld on %4lld: predicted %6.1f TF/s, published %5.1f "
                "(%+5.1f%%)  [%s]\n", run.source, run.model, static_cast<long long>(run.tp),
                static_cast<long long>(run.pp), static_cast<long long>(run.gpus), tflops,
                run.published, error * 100, row.layout.describe().c_str());
  }
  expect_within_targets(errors, "Narayanan Table 1");
}

TEST(plan_published, korthikanti_table_5_iteration_times) {
  std::vector<double> errors;
  for (const PublishedRun& run : kKorthikantiTable5) {
    const PlanRow row = best_for(run);
    const double error = row.time.step() / run.published - 1;
    errors.push_back(error);
    std::printf("%-21s %-16s: predicted %6.2f s, published %6.2f s (%+5.1f%%)  [%s]\n", run.source,
                run.model, row.time.step(), run.published, error * 100,
                row.layout.describe().c_str());
  }
  expect_within_targets(errors, "Korthikanti Table 5");
}

}  // namespace
