#include "meshtrain/optim/loss_scaler.h"

#include <algorithm>
#include <cmath>

#include "meshtrain/core/error.h"

namespace meshtrain {

void LossScalerConfig::validate() const {
  auto pos = [](double v) { return std::isfinite(v) && v > 0; };
  MT_CHECK(pos(min_scale) && pos(max_scale) && min_scale <= max_scale,
           "loss scaler: need 0 < min_scale ({}) <= max_scale ({})", min_scale, max_scale);
  MT_CHECK(initial_scale >= min_scale && initial_scale <= max_scale,
           "loss scaler: initial_scale {} is outside [min_scale {}, max_scale {}]", initial_scale,
           min_scale, max_scale);
  MT_CHECK(growth_interval >= 1, "loss scaler: growth_interval must be >= 1 (got {})",
           growth_interval);
  MT_CHECK(std::isfinite(growth_factor) && growth_factor >= 1,
           "loss scaler: growth_factor must be >= 1 (got {})", growth_factor);
  MT_CHECK(backoff_factor > 0 && backoff_factor < 1,
           "loss scaler: backoff_factor must be in (0, 1) (got {})", backoff_factor);
  MT_CHECK(hysteresis >= 1, "loss scaler: hysteresis must be >= 1 (got {})", hysteresis);
  MT_CHECK(max_consecutive_skips >= 1, "loss scaler: max_consecutive_skips must be >= 1 (got {})",
           max_consecutive_skips);
}

LossScaler::LossScaler(LossScalerConfig cfg)
    : cfg_(cfg), scale_(cfg.initial_scale), hysteresis_left_(cfg.hysteresis) {
  cfg_.validate();
}

bool LossScaler::update(bool found_overflow) {
  if (!found_overflow) {
    consecutive_skips_ = 0;
    if (++growth_tracker_ >= cfg_.growth_interval) {
      scale_ = std::min(scale_ * cfg_.growth_factor, cfg_.max_scale);
      growth_tracker_ = 0;
      hysteresis_left_ = cfg_.hysteresis;
    }
    return true;
  }
  ++skipped_total_;
  ++consecutive_skips_;
  growth_tracker_ = 0;
  if (--hysteresis_left_ <= 0) {
    hysteresis_left_ = 0;
    scale_ = std::max(scale_ * cfg_.backoff_factor, cfg_.min_scale);
  }
  if (consecutive_skips_ >= cfg_.max_consecutive_skips)
    fail("fp16 loss scaling: {} steps in a row had inf/NaN gradients (loss scale now {:g}, "
         "minimum {:g}); the gradients overflow at any scale: lower the learning rate, check the "
         "data, or train with precision = \"bf16\" (loss_scale.max_consecutive_skips raises the "
         "limit)",
         consecutive_skips_, scale_, cfg_.min_scale);
  return false;
}

nlohmann::json LossScaler::to_json() const {
  return {{"scale", scale_},
          {"growth_tracker", growth_tracker_},
          {"hysteresis_left", hysteresis_left_},
          {"consecutive_skips", consecutive_skips_},
          {"skipped_steps", skipped_total_}};
}

void LossScaler::load_json(const nlohmann::json& j) {
  MT_CHECK(j.is_object() && j.contains("scale") && j["scale"].is_number(),
           "loss scaler state must be an object with a numeric \"scale\", got {}", j.dump());
  const double s = j["scale"].get<double>();
  MT_CHECK(std::isfinite(s) && s > 0, "loss scaler state: scale {} is not a positive number", s);
  scale_ = s;
  growth_tracker_ = j.value("growth_tracker", int64_t{0});
  hysteresis_left_ = j.value("hysteresis_left", cfg_.hysteresis);
  consecutive_skips_ = j.value("consecutive_skips", int64_t{0});
  skipped_total_ = j.value("skipped_steps", int64_t{0});
}

}  // namespace meshtrain
