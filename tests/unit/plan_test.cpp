// The planner's formulas against published tables, its model shapes against
// the engine's own layouts, and its search: every layout it returns is valid
// and fits, ranked fastest first, found in the time the issue sets.
//  - ZeRO (Rajbhandari et al. 2020), Table 1: per-device model-state memory
//    (GB = 10^9 bytes) of 7.5B, 128B and 1T models at DP 1..1024 for P_os,
//    P_os+g and P_os+g+p, mixed-precision Adam (2 + 2 + 12 bytes).
//  - Narayanan et al. 2021, Table 1: the parameter counts of every row
//    (billions, one decimal) from Eq. 2.
//  - Korthikanti et al. 2022, Table 2: activations per layer, checked
//    against the per-tensor account of Section 4 (attention 11sbh + 5as^2b,
//    MLP 19sbh, two LayerNorms 4sbh; what tensor parallelism splits).
#include <gtest/gtest.h>

#include <cmath>

#include "meshtrain/core/error.h"
#include "meshtrain/nn/gpt_spec.h"
#include "meshtrain/nn/llama_spec.h"
#include "meshtrain/plan/planner.h"
#include "plan_request.h"

using namespace meshtrain;
using namespace meshtrain::plan;

namespace {

// The table prints 3 significant digits for small values and whole GB for
// large ones (truncated): the formula must agree to within one unit of the
// last printed digit.
void expect_printed(double gb, double printed, const std::string& what) {
  const double unit = printed >= 100 ? 1 : printed >= 10 ? 0.1 : 0.01;
  EXPECT_LE(std::fabs(gb - printed), unit) << what << ": formula " << gb << " GB, table " << printed;
}

TEST(plan_formulas, zero_paper_table_1) {
  struct Row {
    int64_t dp;
    double m7[3], m128[3], m1t[3];
  };
  const Row rows[] = {
      {1, {120, 120, 120}, {2048, 2048, 2048}, {16000, 16000, 16000}},
      {4, {52.5, 41.3, 30}, {896, 704, 512}, {7000, 5500, 4000}},
      {16, {35.6, 21.6, 7.5}, {608, 368, 128}, {4750, 2875, 1000}},
      {64, {31.4, 16.6, 1.88}, {536, 284, 32}, {4187, 2218, 250}},
      {256, {30.4, 15.4, 0.47}, {518, 263, 8}, {4046, 2054, 62.5}},
      {1024, {30.1, 15.1, 0.12}, {513, 257, 2}, {4011, 2013, 15.6}},
  };
  for (const Row& r : rows)
    for (int stage = 1; stage <= 3; ++stage) {
      const std::string at = "dp " + std::to_string(r.dp) + " stage " + std::to_string(stage);
      expect_printed(zero_model_state_bytes(7.5e9, r.dp, stage) / 1e9, r.m7[stage - 1], "7.5B " + at);
      expect_printed(zero_model_state_bytes(128e9, r.dp, stage) / 1e9, r.m128[stage - 1], "128B " + at);
      expect_printed(zero_model_state_bytes(1e12, r.dp, stage) / 1e9, r.m1t[stage - 1], "1T " + at);
    }
  // Stage 0 is the baseline column (DP = 1): 16 bytes per parameter.
  EXPECT_DOUBLE_EQ(zero_model_state_bytes(7.5e9, 64, 0), 120e9);
}

TEST(plan_formulas, narayanan_table_1_parameter_counts) {
  struct Row {
    int64_t heads, hidden, layers;
    double billions;
  };
  const Row rows[] = {{24, 2304, 24, 1.7},     {32, 3072, 30, 3.6},    {32, 4096, 36, 7.5},
                      {48, 6144, 40, 18.4},    {64, 8192, 48, 39.1},   {80, 10240, 60, 76.1},
                      {96, 12288, 80, 145.6},  {128, 16384, 96, 310.1}, {128, 20480, 105, 529.6},
                      {160, 25600, 128, 1008.0}};
  for (const Row& r : rows) {
    const double p = narayanan_params(r.layers, r.hidden, 51200, 2048) / 1e9;
    // Both sides are one-decimal numbers held in double: equal up to their
    // representation (~1e-13); a wrong formula misses by >= 0.1.
    EXPECT_NEAR(std::round(p * 10) / 10, r.billions, 1e-9) << r.hidden << " x " << r.layers << ": " << p;
  }
  // The planner's GPT count is Eq. 2 plus the final LayerNorm (2h).
  const TransformerShape s = *shape_preset("gpt-1t");
  EXPECT_DOUBLE_EQ(static_cast<double>(s.params()), narayanan_params(128, 25600, 51200, 2048) + 2 * 25600);
}

TEST(plan_formulas, korthikanti_table_2_from_the_per_tensor_account) {
  const double s = 2048, b = 1, h = 6144, a = 64;  // their 22B model
  const double sbh = s * b * h, scores = 5 * a * s * s * b;
  // Section 4: attention 11 sbh + 5 a s^2 b, MLP 19 sbh, LayerNorms 4 sbh.
  // Tensor parallelism splits all but the QKV input (2 sbh) and the dropout
  // mask (sbh) of each block and the LayerNorms; sequence parallelism those too.
  for (int64_t t : {1, 2, 8}) {
    const double split_scores = scores / static_cast<double>(t);
    const double tp_none = (2 + 1 + 2 + 1 + 4) * sbh + (8 + 16) * sbh / t + split_scores;
    const double tp_sp = 34 * sbh / t + split_scores;
    // Whole byte counts below 2^53 in double; 1 byte absorbs the order of
    // the formula's terms (measured 2.4e-7).
    EXPECT_NEAR(activation_bytes_per_layer(s, b, h, a, t, false, RecomputePolicy::None),
                t == 1 ? 34 * sbh + scores : tp_none, 1) << "t " << t;
    if (t > 1) {
      EXPECT_NEAR(activation_bytes_per_layer(s, b, h, a, t, true, RecomputePolicy::None), tp_sp, 1);
    }
    EXPECT_NEAR(activation_bytes_per_layer(s, b, h, a, t, t > 1, RecomputePolicy::Selective),
                t > 1 ? 34 * sbh / t : 34 * sbh, 1);
    EXPECT_NEAR(activation_bytes_per_layer(s, b, h, a, t, false, RecomputePolicy::Full), 2 * sbh, 1);
  }
}

TEST(plan_shapes, parameter_counts_equal_the_engine_layouts) {
  // Presets whose vocabulary needs no padding (the engine pads it).
  const TransformerShape g = *shape_preset("char-6L");
  EXPECT_EQ(g.params(), GPTSpec::make(gpt_preset("char-6L"))->num_params());
  const TransformerShape l = *shape_preset("llama-char");
  EXPECT_EQ(l.params(), LlamaSpec::make(llama_preset("llama-char"))->num_params());
  EXPECT_FALSE(shape_preset("no-such-model"));
}

TEST(plan_search, returns_only_valid_fitting_layouts_fastest_first) {
  const PlanRequest r = plan_request("gpt-100b", "h100-sxm", 64, 1536);
  const PlanResult res = make_plan(r);
  ASSERT_FALSE(res.rows.empty());
  EXPECT_GE(res.considered, static_cast<int64_t>(res.rows.size()));
  const double limit = r.cluster.memory_gb * 1e9 * r.cluster.usable_fraction;
  for (size_t i = 0; i < res.rows.size(); ++i) {
    const Layout& l = res.rows[i].layout;
    EXPECT_EQ(l.dp * l.tp * l.pp, 64);
    EXPECT_EQ(l.dp * l.micro_batch * l.micro_batches, 1536);
    EXPECT_EQ(r.model.heads % l.tp, 0);
    EXPECT_EQ(r.model.layers % l.pp, 0);
    EXPECT_LE(l.tp, r.cluster.gpus_per_node);
    EXPECT_LE(res.rows[i].memory.total(), limit);
    if (i > 0) {
      // The planner sorts by speed in 0.1% buckets (then by traffic and
      // memory): a later row may be faster by less than 0.1%.
      EXPECT_LE(res.rows[i].tokens_per_s, res.rows[i - 1].tokens_per_s * 1.001);
    }
  }
  // 100B does not fit without sharding: no plain data-parallel replica.
  for (const PlanRow& row : res.rows) EXPECT_FALSE(row.layout.tp == 1 && row.layout.pp == 1 && row.layout.zero_stage == 0);
  // Twice the GPUs, the same batch: faster.
  EXPECT_GT(make_plan(plan_request("gpt-100b", "h100-sxm", 128, 1536)).rows.front().tokens_per_s,
            res.rows.front().tokens_per_s);
}

// The optimizer's state is the k of the ZeRO formulas: SGD with momentum
// keeps 8 bytes per parameter (master + momentum) where AdamW keeps 12, so
// the same layout needs a third less optimizer memory, all of it sharded
// alike; unknown optimizers are refused.
TEST(plan_search, optimizer_state_follows_the_optimizer) {
  const PlanRequest adam = plan_request("gpt-100b", "h100-sxm", 64, 1536);
  PlanRequest sgd = adam;
  sgd.optimizer_state_bytes = optimizer_state_bytes("sgd");
  EXPECT_EQ(optimizer_state_bytes("adamw"), 12);
  EXPECT_EQ(optimizer_state_bytes("lamb"), 12);
  EXPECT_EQ(optimizer_state_bytes("lars"), 8);
  EXPECT_EQ(optimizer_state_bytes("sgd", false), 4);
  EXPECT_THROW(optimizer_state_bytes("adagrad"), meshtrain::UsageError);
  const PlanResult a = make_plan(adam), b = make_plan(sgd);
  ASSERT_FALSE(a.rows.empty());
  ASSERT_FALSE(b.rows.empty());
  const Layout& la = a.rows.front().layout;
  for (const PlanRow& row : b.rows) {
    const Layout& l = row.layout;
    if (l.describe() != la.describe() || l.micro_batch != la.micro_batch || l.recompute != la.recompute ||
        l.sequence_parallel != la.sequence_parallel || l.chunks != la.chunks || l.zero_stage != la.zero_stage)
      continue;
    EXPECT_NEAR(row.memory.optimizer, a.rows.front().memory.optimizer * 8 / 12, 1);
    EXPECT_EQ(row.memory.params, a.rows.front().memory.params);
    return;
  }
  ADD_FAILURE() << "the AdamW plan's first layout is missing from the SGD plan";
}

TEST(plan_search, offload_moves_the_moments_out_and_costs_their_transfer) {
  PlanRequest mem = plan_request("gpt-100b", "h100-sxm", 64, 1536);
  PlanRequest off = mem;
  off.offload_gbps = 2;
  const PlanResult a = make_plan(mem);
  ASSERT_FALSE(a.rows.empty());
  const Layout l = a.rows.front().layout;
  const PlanRow x = evaluate_layout(mem, l), y = evaluate_layout(off, l);
  const double own_optimizer = x.memory.optimizer;  // 12 bytes per own parameter
  // The byte counts below are doubles from divisions over ~1e11 bytes; 1 byte
  // absorbs their rounding, a wrong term (the master offloaded, the staging
  // missing) is off by gigabytes or by 96 MB.
  EXPECT_DOUBLE_EQ(x.memory.offloaded, 0);
  EXPECT_NEAR(y.memory.offloaded, own_optimizer * 8 / 12, 1);
  EXPECT_NEAR(y.memory.optimizer, own_optimizer * 4 / 12 + kOffloadStagingBytes, 1);
  EXPECT_EQ(y.memory.params, x.memory.params);
  // Read and write of the moments at 2 GB/s bound the update (the same
  // formula in double: 1e-9 s is rounding, a missing factor 2 is seconds).
  EXPECT_NEAR(y.time.optimizer, std::max(x.time.optimizer, 2 * y.memory.offloaded / 2e9), 1e-9);
  EXPECT_GT(y.time.optimizer, x.time.optimizer);
}

// How long planning takes is not asserted (wall time on a shared machine is
// for benchmarks; `meshtrain plan --json` reports it as "seconds").
TEST(plan_search, a_trillion_on_4096_gpus_is_planned_and_on_8_fits_nowhere) {
  const PlanResult big = make_plan(plan_request("gpt-1t", "a100-80gb", 4096, 4096));
  EXPECT_FALSE(big.rows.empty());
  const PlanResult small = make_plan(plan_request("gpt-1t", "a100-40gb", 8, 64));
  EXPECT_TRUE(small.rows.empty());
  EXPECT_GT(small.smallest.memory.total(), 40e9);
  EXPECT_THROW(make_plan(plan_request("gpt-100b", "h100-sxm", 7, 1536)), Error);  // 7 splits nothing
}

TEST(plan_cluster, unknown_names_and_bad_files_are_clear_errors) {
  try {
    ClusterSpec::load("h900");
    ADD_FAILURE() << "unknown cluster accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("h100-sxm"), std::string::npos) << e.what();
  }
}

}  // namespace
