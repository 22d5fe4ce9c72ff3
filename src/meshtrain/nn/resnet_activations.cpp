#include "meshtrain/nn/resnet_activations.h"

#include <algorithm>

namespace meshtrain {

ResNetActivations ResNetActivations::make(const ResNetPlan& plan, int64_t B, const Recompute& recompute) {
  ResNetActivations a;
  int64_t at = 0;
  auto take = [&](int64_t n) {
    const int64_t o = at;
    at += n;
    a.largest = std::max(a.largest, n);
    return o;
  };
  // The convolutions whose outputs live in the shared scratch: those of a
  // recomputed block, except the last one's batch-norm output (the block's).
  std::vector<char> in_scratch(plan.convs.size(), 0);
  for (size_t b = 0; b < plan.blocks.size(); ++b) {
    if (!recompute.recomputes_block(static_cast<int>(b))) continue;
    const ResBlock& blk = plan.blocks[b];
    for (int i : blk.convs) in_scratch[static_cast<size_t>(i)] = 1;
    if (blk.shortcut >= 0) in_scratch[static_cast<size_t>(blk.shortcut)] = 1;
  }
  a.input = take(B * plan.convs[0].shape.in_numel());
  a.convs.resize(plan.convs.size());
  for (size_t i = 0; i < plan.convs.size(); ++i) {
    const ConvBN& c = plan.convs[i];
    Conv& x = a.convs[i];
    if (!in_scratch[i]) {
      x.out = take(B * c.shape.out_numel());
      x.bn = take(B * c.shape.out_numel());
    }
    x.mean = take(c.shape.OC);
    x.rstd = take(c.shape.OC);
    a.widest_channels = std::max(a.widest_channels, c.shape.OC);
  }
  for (const ResBlock& blk : plan.blocks)  // a recomputed block's output stays
    if (in_scratch[static_cast<size_t>(blk.convs.back())])
      a.convs[static_cast<size_t>(blk.convs.back())].bn = take(B * plan.convs[static_cast<size_t>(blk.convs.back())].shape.out_numel());
  if (plan.stem_pool.KH > 0) {
    a.pool = take(B * plan.stem_pool.out_numel());
    a.argmax = take(B * plan.stem_pool.out_numel());
  }
  a.pooled = take(B * plan.features);
  a.logits = take(B * plan.classes);
  a.losses = take(B);
  // The scratch: as large as the largest recomputed block needs.
  int64_t scratch = 0;
  for (const ResBlock& blk : plan.blocks) {
    if (!in_scratch[static_cast<size_t>(blk.convs.back())]) continue;
    int64_t local = 0;
    auto place = [&](int i, bool bn_too) {
      const int64_t n = B * plan.convs[static_cast<size_t>(i)].shape.out_numel();
      a.largest = std::max(a.largest, n);
      a.convs[static_cast<size_t>(i)].out = at + local;
      local += n;
      if (bn_too) {
        a.convs[static_cast<size_t>(i)].bn = at + local;
        local += n;
      }
    };
    for (int i : blk.convs) place(i, i != blk.convs.back());
    if (blk.shortcut >= 0) place(blk.shortcut, true);
    scratch = std::max(scratch, local);
  }
  at += scratch;
  a.floats = at;
  return a;
}

}  // namespace meshtrain
