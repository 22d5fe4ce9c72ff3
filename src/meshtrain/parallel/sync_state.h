// What a gradient-sync strategy (and its codec) keeps between steps that a
// checkpoint must carry for a resumed run to continue exactly: error-feedback
// residuals, PowerSGD's warm-start Q, local SGD's outer momentum, and the
// counters that go with them.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "meshtrain/core/tensor.h"

namespace meshtrain::parallel {

struct SyncStateTensor {
  std::string name;         // its buffer's name in the checkpoint ("sync.residual", ...)
  Tensor* tensor = nullptr; // f32, in host memory
  // Each rank's own (saved as rank r's block of a world x n buffer);
  // false: the same on every rank (saved once, like the parameters).
  bool per_rank = false;
};

// A strategy's or codec's state: tensors, and this rank's counters (JSON,
// saved in its rank blob).
struct SyncState {
  std::vector<SyncStateTensor> tensors;
  nlohmann::json counters = nlohmann::json::object();
};

}  // namespace meshtrain::parallel
