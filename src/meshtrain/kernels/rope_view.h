// The cos and sin of every (position, channel pair) angle of rotary
// embeddings, (T, half) each, in the memory of the device the kernel runs on.
#pragma once
#include <cstdint>

namespace meshtrain {

struct RopeView {
  const float* cos = nullptr;
  const float* sin = nullptr;
  int64_t T = 0, half = 0;
};

}  // namespace meshtrain
