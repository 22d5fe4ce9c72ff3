// How a model's layers are cut into pipeline stages (parallel/pipeline_stages.h):
// balanced by model FLOPs with the head counted (GPT-2's 50k-token head
// weighs about five layers, so two stages cut its 12 layers 8 + 4, where an
// even cut leaves the last stage 22% more work), even when the head is
// cheap, the planner's cut of its own shape equal to the engine's, as given
// when parallel.stage_layers names the counts, and a clear
// error for counts that do not fit the model or the layout.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "meshtrain/core/error.h"
#include "meshtrain/nn/model_registry.h"
#include "meshtrain/parallel/pipeline_stages.h"
#include "meshtrain/plan/stage_cut.h"
#include "error_of.h"

using namespace meshtrain;
using parallel::PipelineLayout;
using meshtrain::testing::error_of;

namespace {

PipelineLayout layout(int64_t stages, int64_t chunks = 1, std::vector<int> given = {}) {
  PipelineLayout l;
  l.stages = stages;
  l.chunks = chunks;
  l.stage_layers = std::move(given);
  return l;
}

// The most expensive virtual stage of a cut, in model FLOPs per token.
double worst(const ModelSpec& m, const std::vector<int>& layers) {
  const ModelSpec::StageCosts c = m.stage_costs(m.seq_len());
  double out = 0;
  for (size_t v = 0; v < layers.size(); ++v)
    out = std::max(out, layers[v] * c.layer + (v == 0 ? c.first : 0) + (v + 1 == layers.size() ? c.last : 0));
  return out;
}

}  // namespace

TEST(pipeline_stages, a_large_head_takes_layers_from_the_last_stage) {
  const auto gpt2 = model_preset("gpt2");
  const ModelSpec::StageCosts c = gpt2->stage_costs(1024);
  EXPECT_NEAR(c.last / c.layer, 4.9, 0.1);  // 6 x 50304 x 768 over one layer's FLOPs
  EXPECT_EQ(parallel::pipeline_stage_layers(*gpt2, layout(2)), (std::vector<int>{8, 4}));
  EXPECT_LT(worst(*gpt2, {8, 4}), worst(*gpt2, {6, 6}) / 1.2);
  // Every cut into 4 stages is no better than the one chosen.
  const std::vector<int> four = parallel::pipeline_stage_layers(*gpt2, layout(4));
  EXPECT_EQ(std::accumulate(four.begin(), four.end(), 0), 12);
  for (int a = 1; a <= 9; ++a)
    for (int b = 1; a + b <= 10; ++b)
      for (int d = 1; a + b + d <= 11; ++d)
        EXPECT_LE(worst(*gpt2, four), worst(*gpt2, {a, b, d, 12 - a - b - d}) * (1 + 1e-12));
  // Interleaved: 2 x 2 virtual stages, the last of them the shortest.
  const std::vector<int> il = parallel::pipeline_stage_layers(*gpt2, layout(2, 2));
  EXPECT_EQ(il.size(), 4u);
  EXPECT_EQ(*std::min_element(il.begin(), il.end()), il.back());
}

// The planner times the stages the engine cuts: its own shape's costs
// (plan::transformer_stage_cost) give the engine's cut of the same model.
TEST(pipeline_stages, the_planner_cuts_as_the_engine_does) {
  const auto gpt2 = model_preset("gpt2");
  const auto shape = plan::shape_preset("gpt2");
  ASSERT_TRUE(shape.has_value());
  const plan::StageCost cost = plan::transformer_stage_cost(*shape, 1024);
  for (int64_t stages : {2, 3, 4})
    EXPECT_EQ(plan::cut_layers_by_cost(12, static_cast<int>(stages), cost),
              parallel::pipeline_stage_layers(*gpt2, layout(stages)))
        << stages << " stages";
  EXPECT_EQ(plan::cut_layers_by_cost(12, 4, cost), parallel::pipeline_stage_layers(*gpt2, layout(2, 2)));
  // Pipeline rank 1 of 2 x 2 chunks holds virtual stages 1 and 3 (the head).
  const plan::RankShare r1 = plan::rank_share(plan::cut_layers_by_cost(12, 4, cost), 2, 1);
  EXPECT_TRUE(r1.last);
  EXPECT_FALSE(r1.first);
  const std::vector<int> il = parallel::pipeline_stage_layers(*gpt2, layout(2, 2));
  EXPECT_EQ(r1.layers, il[1] + il[3]);
}

TEST(pipeline_stages, a_cheap_head_leaves_the_even_cut) {
  const auto char6 = model_preset("char-6L");  // 65 tokens: the head is a fraction of a layer
  EXPECT_EQ(parallel::pipeline_stage_layers(*char6, layout(2)), (std::vector<int>{3, 3}));
  EXPECT_EQ(parallel::pipeline_stage_layers(*char6, layout(3)), (std::vector<int>{2, 2, 2}));
  EXPECT_EQ(parallel::pipeline_stage_layers(*char6, layout(2, 2)), (std::vector<int>{2, 2, 1, 1}));
}

TEST(pipeline_stages, given_counts_are_used_and_checked) {
  const auto char6 = model_preset("char-6L");
  EXPECT_EQ(parallel::pipeline_stage_layers(*char6, layout(2, 1, {5, 1})), (std::vector<int>{5, 1}));
  EXPECT_NE(error_of([&] { parallel::pipeline_stage_layers(*char6, layout(2, 1, {3, 2})); })
                .find("parallel.stage_layers adds up to 5 layers; the model has 6"),
            std::string::npos);
  EXPECT_NE(error_of([&] { parallel::pipeline_stage_layers(*char6, layout(2, 2, {3, 3})); })
                .find("parallel.stage_layers gives 2 virtual stage(s); parallel.pp = 2 x parallel.chunks = 2 needs 4"),
            std::string::npos);
  EXPECT_EQ(parallel::parse_stage_layers("9,3", "x"), (std::vector<int>{9, 3}));
  EXPECT_TRUE(parallel::parse_stage_layers("", "x").empty());
  for (const char* bad : {"3,,3", "3,0", "a,3", "3,", "-1,7"})
    EXPECT_NE(error_of([&] { parallel::parse_stage_layers(bad, "parallel.stage_layers"); })
                  .find("parallel.stage_layers must be layer counts >= 1 separated by commas"),
              std::string::npos) << bad;
}
