// Learning-rate schedules: linear warmup, then cosine, linear or constant.
#pragma once
#include <cstdint>
#include <string>

namespace meshtrain {

struct LrSchedule {
  std::string kind = "cosine";  // cosine | linear | constant
  float max_lr = 6e-4f;
  float min_lr_ratio = 0.1f;    // final lr = max_lr * min_lr_ratio
  int64_t warmup = 0;
  int64_t total = 1;

  // Learning rate for 0-based step `step`.
  float at(int64_t step) const;
};

}  // namespace meshtrain
