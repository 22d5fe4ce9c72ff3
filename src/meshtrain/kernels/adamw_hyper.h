// The hyperparameters of one fused AdamW step, as every device's kernel takes them.
#pragma once
#include <cstdint>

namespace meshtrain {

struct AdamWHyper {
  float lr = 6e-4f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  float grad_scale = 1.0f;  // multiply gradients by this first (clip coefficient)
  int64_t step = 1;         // 1-based, for bias correction
};

}  // namespace meshtrain
