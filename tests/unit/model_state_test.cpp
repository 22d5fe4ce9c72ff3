// test-links: mt_train
// Model state in the flat buffer (ParamInfo::trained = false: batch norm's
// running statistics): the optimizer's segments keep it apart, an AdamW step
// leaves it bit-identical whatever its gradient holds while the trained
// parameters beside it move, and a layout may not decay, half-round or
// adapt it.
#include <gtest/gtest.h>

#include <vector>

#include "meshtrain/nn/model.h"
#include "meshtrain/optim/adamw.h"
#include "meshtrain/train/train_step.h"

using namespace meshtrain;

namespace {

ParamLayout layout_with_state() {
  ParamLayout l;
  l.params.push_back({"conv.weight", {4, 3}, 0, 0, true, false});
  ParamInfo mean{"bn.running_mean", {3}, 12, 0, false, false};
  mean.trained = false;
  ParamInfo var{"bn.running_var", {3}, 15, 0, false, false};
  var.trained = false;
  l.params.push_back(mean);
  l.params.push_back(var);
  l.params.push_back({"bn.weight", {3}, 18, 0, false, false});
  l.numel = 21;
  l.units.push_back({"all", 0, 21});
  l.order = {{true, 0, false}, {false, 0, false}, {true, 0, true}, {false, 0, true}};
  return l;
}

}  // namespace

TEST(model_state, optimizer_segments_keep_state_apart) {
  const ParamLayout l = layout_with_state();
  l.validate();
  const std::vector<ParamSegment> segs = param_segments(l);
  ASSERT_EQ(segs.size(), 3u);
  EXPECT_TRUE(segs[0].trained);
  EXPECT_EQ(segs[1].begin, 12);
  EXPECT_EQ(segs[1].end, 18);  // both statistics in one segment
  EXPECT_FALSE(segs[1].trained);
  EXPECT_TRUE(segs[2].trained);
  EXPECT_FALSE(segs[2].decay);
}

TEST(model_state, adamw_leaves_state_bit_identical) {
  const ParamLayout l = layout_with_state();
  std::vector<float> params(21), grads(21, 0.5f);
  for (int i = 0; i < 21; ++i) params[i] = 0.1f * static_cast<float>(i + 1);
  const std::vector<float> before = params;
  AdamW adam(0, 21, param_segments(l), AdamWConfig{});
  for (int s = 0; s < 3; ++s) adam.step(params.data(), grads.data(), 1e-2f);
  for (int i = 0; i < 21; ++i) {
    if (i >= 12 && i < 18)
      EXPECT_EQ(params[i], before[i]) << "state element " << i;
    else
      EXPECT_NE(params[i], before[i]) << "trained element " << i;
  }
}

TEST(model_state, state_cannot_be_decayed_or_rounded) {
  ParamLayout l = layout_with_state();
  l.params[1].decay = true;
  EXPECT_THROW(l.validate(), Error);
  l = layout_with_state();
  l.params[2].half_weight = true;
  EXPECT_THROW(l.validate(), Error);
}
