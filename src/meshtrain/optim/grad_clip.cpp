#include "meshtrain/optim/grad_clip.h"

namespace meshtrain {

float clip_coefficient(double global_norm, float max_norm) {
  if (max_norm <= 0.0f || global_norm <= max_norm) return 1.0f;
  return static_cast<float>(max_norm / (global_norm + 1e-6));
}

}  // namespace meshtrain
