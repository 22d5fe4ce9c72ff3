// Where a ResNet micro-batch's activations sit in one buffer (the model
// carves it; ResNetSpec::memory counts it, so the prediction is exact):
// a copy of the input, then per convolution its output and its batch norm's
// output (after the ReLU where one follows; a block's last one also holds
// the block's output after the residual sum and ReLU) with the batch mean
// and 1/std per channel, the stem's pool with its argmax (int32), the pooled features, the logits
// and per-image losses.
// Under activation recompute (Recompute::recomputes_block(b)) a block keeps
// only its output and its batch norms' mean and 1/std; its other
// convolution and batch-norm outputs share one scratch region with every
// other recomputed block, refilled when backward re-runs the block.
#pragma once
#include <cstdint>
#include <vector>

#include "meshtrain/nn/recompute.h"
#include "meshtrain/nn/resnet_plan.h"

namespace meshtrain {

struct ResNetActivations {
  struct Conv {
    int64_t out = 0, bn = 0, mean = 0, rstd = 0;  // offsets (floats)
  };
  int64_t input = 0, pool = 0, argmax = 0, pooled = 0, logits = 0, losses = 0;  // argmax: int32
  std::vector<Conv> convs;
  int64_t floats = 0;          // the whole buffer
  int64_t largest = 0;         // the largest activation tensor (B x C x H x W)
  int64_t widest_channels = 0;

  static ResNetActivations make(const ResNetPlan& plan, int64_t B, const Recompute& recompute = {});
  // The backward's scratch: three gradients of the largest size and the
  // batch norms' per-channel sums (double); under mixed precision then two
  // 16-bit operands of the largest size (a convolution's input and output
  // gradient rounded for it), from half_scratch() on.
  int64_t half_scratch() const { return 3 * largest + 8 * widest_channels; }
  int64_t workspace_floats(bool mixed) const { return half_scratch() + (mixed ? largest : 0); }
};

}  // namespace meshtrain
