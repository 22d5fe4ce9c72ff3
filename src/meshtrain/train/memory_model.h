// Memory a single-process training step should need, from the model's shape
// alone (an analytic count, independent of how the buffers are laid out).
#pragma once
#include <cstdint>

#include "meshtrain/nn/gpt_config.h"
#include "meshtrain/nn/recompute.h"

namespace meshtrain {

struct MemoryPrediction {
  int64_t params = 0, grads = 0, optimizer = 0, activations = 0, workspace = 0;
  int64_t total_bytes() const { return params + grads + optimizer + activations + workspace; }
};

// f32 parameters, gradients and AdamW moments (2 per parameter), activations
// saved for backward plus backward scratch, and attention scratch per thread.
// Activations follow the recompute policy (GPT::activation_bytes: exact).
MemoryPrediction predict_training_memory(const GPTConfig& cfg, int B, int T, int threads,
                                         const Recompute& recompute = {});

}  // namespace meshtrain
