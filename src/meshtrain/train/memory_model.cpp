#include "meshtrain/train/memory_model.h"

namespace meshtrain {

MemoryPrediction predict_training_memory(const ModelSpec& spec, int B, int T, int threads,
                                         const Recompute& recompute, Precision precision) {
  const int64_t P = spec.num_params();
  MemoryPrediction m;
  m.params = (is_mixed(precision) ? 6 : 4) * P;
  m.grads = 4 * P;
  m.optimizer = 8 * P;
  const ModelMemory mm = spec.memory(B, T, threads, recompute, precision);
  m.activations = mm.activations;
  m.workspace = mm.workspace;
  return m;
}

}  // namespace meshtrain
