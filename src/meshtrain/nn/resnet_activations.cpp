#include "meshtrain/nn/resnet_activations.h"

#include <algorithm>

namespace meshtrain {

ResNetActivations ResNetActivations::make(const ResNetPlan& plan, int64_t B) {
  ResNetActivations a;
  int64_t at = 0;
  auto take = [&](int64_t n) {
    const int64_t o = at;
    at += n;
    a.largest = std::max(a.largest, n);
    return o;
  };
  a.input = take(B * plan.convs[0].shape.in_numel());
  for (const ConvBN& c : plan.convs) {
    const int64_t n = B * c.shape.out_numel();
    Conv x;
    x.out = take(n);
    x.bn = take(n);
    x.mean = take(c.shape.OC);
    x.rstd = take(c.shape.OC);
    a.convs.push_back(x);
    a.widest_channels = std::max(a.widest_channels, c.shape.OC);
  }
  if (plan.stem_pool.KH > 0) {
    a.pool = take(B * plan.stem_pool.out_numel());
    a.argmax = take(B * plan.stem_pool.out_numel());
  }
  a.pooled = take(B * plan.features);
  a.logits = take(B * plan.classes);
  a.losses = take(B);
  a.floats = at;
  return a;
}

}  // namespace meshtrain
