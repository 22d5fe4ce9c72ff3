// fp16 dynamic loss scaling. The loss (so every gradient) is multiplied by
// scale() before backward, so small gradients survive fp16's narrow range;
// the optimizer divides it out. A step whose gradients hold inf/NaN is
// skipped and the scale lowered; after a window of good steps it grows.
//
// update() must get the overflow flag reduced over every rank (true when ANY
// rank saw inf/NaN), so all ranks skip the same steps and hold the same scale.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>

namespace meshtrain {

struct LossScalerConfig {
  double initial_scale = 65536.0;    // 2^16
  int64_t growth_interval = 2000;    // good steps in a row before the scale grows
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  // Overflows tolerated before the scale is lowered: 1 lowers it on every
  // overflow; H lowers it on the H-th overflow since the last growth and on
  // every one after that (a growth re-arms the allowance). Every overflow
  // skips its step either way.
  int hysteresis = 1;
  double min_scale = 1.0;
  double max_scale = 16777216.0;     // 2^24
  // Consecutive skipped steps after which training stops with an error.
  int64_t max_consecutive_skips = 50;

  void validate() const;  // throws meshtrain::Error naming the bad field
};

class LossScaler {
 public:
  explicit LossScaler(LossScalerConfig cfg = {});

  float scale() const { return static_cast<float>(scale_); }
  // Records one step's outcome; returns true when the update may be applied
  // (no overflow), false when the step must be skipped. Throws
  // meshtrain::Error after max_consecutive_skips overflowing steps in a row.
  bool update(bool found_overflow);

  int64_t skipped_steps() const { return skipped_total_; }
  int64_t consecutive_skips() const { return consecutive_skips_; }
  int64_t good_steps_since_change() const { return growth_tracker_; }
  const LossScalerConfig& config() const { return cfg_; }

  // State for checkpoints (the config travels with the training config).
  nlohmann::json to_json() const;
  void load_json(const nlohmann::json& j);

 private:
  LossScalerConfig cfg_;
  double scale_;
  int64_t growth_tracker_ = 0;   // good steps since the last growth or overflow
  int hysteresis_left_;          // overflows still tolerated before lowering
  int64_t consecutive_skips_ = 0;
  int64_t skipped_total_ = 0;
};

}  // namespace meshtrain
