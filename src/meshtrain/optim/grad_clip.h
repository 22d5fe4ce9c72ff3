// Global gradient-norm clipping.
#pragma once
#include <cstdint>

namespace meshtrain {

// Coefficient to multiply gradients by so that their global norm is at most
// max_norm (1 when already below, or when max_norm <= 0 disables clipping).
float clip_coefficient(double global_norm, float max_norm);

}  // namespace meshtrain
