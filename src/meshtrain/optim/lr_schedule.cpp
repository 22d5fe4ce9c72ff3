#include "meshtrain/optim/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "meshtrain/core/error.h"

namespace meshtrain {

float LrSchedule::at(int64_t step) const {
  // Warmup reaches max_lr at step `warmup - 1`, never starts at exactly 0.
  if (step < warmup) return max_lr * static_cast<float>(step + 1) / static_cast<float>(warmup);
  const float min_lr = max_lr * min_lr_ratio;
  if (kind == "constant") return max_lr;
  const int64_t span = std::max<int64_t>(1, total - warmup);
  const double frac = std::clamp(static_cast<double>(step - warmup) / span, 0.0, 1.0);
  if (kind == "linear") return static_cast<float>(max_lr + (min_lr - max_lr) * frac);
  if (kind == "cosine")
    return static_cast<float>(min_lr + 0.5 * (max_lr - min_lr) * (1.0 + std::cos(M_PI * frac)));
  fail("unknown learning-rate schedule '{}' (expected cosine, linear or constant)", kind);
}

}  // namespace meshtrain
