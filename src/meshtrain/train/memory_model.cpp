#include "meshtrain/train/memory_model.h"

namespace meshtrain {

MemoryPrediction predict_training_memory(const ModelSpec& spec, int B, int T, int threads,
                                         const Recompute& recompute, Precision precision,
                                         Device device, int activation_slots, bool split_backward,
                                         int optimizer_states) {
  const int64_t P = spec.num_params();
  MemoryPrediction m;
  // A LoRA model's adapters have no 16-bit copy of their own (nn/lora_model.h).
  m.params = (is_mixed(precision) && !spec.frozen_base() ? 6 : 4) * P;
  m.grads = 4 * P;
  m.optimizer = 4 * static_cast<int64_t>(optimizer_states) * P;
  const ModelMemory mm = spec.memory(B, T, threads, recompute, precision);
  const int64_t slots = activation_slots;
  m.activations = slots * (mm.activations + (split_backward ? mm.deferred_weights : 0));
  m.workspace = slots * (mm.workspace - mm.shared_workspace) + mm.shared_workspace +
                (device.is_cpu() ? mm.host_gemm_scratch : 0);  // the GEMMs' scratch is per thread
  m.frozen_params = mm.frozen_params;
  m.params += mm.frozen_params;
  return m;
}

}  // namespace meshtrain
