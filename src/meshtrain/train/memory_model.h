// Memory a single-process training step should need, from the model's shape
// alone (an analytic count, independent of how the buffers are laid out).
#pragma once
#include <cstdint>

#include "meshtrain/nn/model.h"
#include "meshtrain/nn/precision.h"
#include "meshtrain/nn/recompute.h"

namespace meshtrain {

struct MemoryPrediction {
  int64_t params = 0, grads = 0, optimizer = 0, activations = 0, workspace = 0;
  // Of params: a frozen base's (LoRA; ModelMemory::frozen_params).
  int64_t frozen_params = 0;
  int64_t total_bytes() const { return params + grads + optimizer + activations + workspace; }
};

// f32 parameters, gradients and the optimizer's state (`optimizer_states`
// f32 values per parameter: AdamW's and LAMB's moments 2, SGD's and LARS's
// momentum 1; OptimizerConfig::states_per_param), activations
// saved for backward plus backward scratch, and attention scratch per thread.
// Activations and workspace come from the model (ModelSpec::memory: exact).
// Mixed precision adds the model's 16-bit compute copy (2 bytes per
// parameter) to the parameters, stores GEMM-only activations in 16 bits, and
// (fp16, or bf16 without the oneDNN path) needs the f32 widening scratch of
// the largest GEMM operands (kernels/cpu/gemm_bf16.h).
// `device`: where the model lives; its workspace leaves out the CPU GEMMs'
// host scratch unless that is the CPU. `activation_slots`: the micro-batches
// a pipeline stage holds at once (Model::set_activation_slots), each with
// its activations and its own scratch; `split_backward` (zero-bubble
// schedules): each slot also holds its queued weight GEMMs' operands
// (ModelMemory::deferred_weights).
MemoryPrediction predict_training_memory(const ModelSpec& spec, int B, int T, int threads,
                                         const Recompute& recompute = {},
                                         Precision precision = Precision::FP32,
                                         Device device = Device::cpu(), int activation_slots = 1,
                                         bool split_backward = false, int optimizer_states = 2);

}  // namespace meshtrain
