#include "meshtrain/config/train_config.h"

#include <charconv>
#include <cmath>

#include "meshtrain/config/config_schema.h"
#include "meshtrain/core/error.h"

namespace meshtrain {

namespace {

// One writer for both JSON flavours, from the schema: json (sorted keys, for
// saving and comparing) and ordered_json (the documented order, for people).
template <typename J>
J to_json(const TrainConfig& c) {
  J j = J::object();
  for (const ConfigKey& k : config_schema()) {
    J* node = &j;
    size_t start = 0;
    for (size_t dot = k.path.find('.'); dot != std::string::npos; dot = k.path.find('.', start)) {
      node = &(*node)[k.path.substr(start, dot - start)];
      start = dot + 1;
    }
    (*node)[k.path.substr(start)] = J(k.value(c));
  }
  return j;
}

}  // namespace

nlohmann::json resolved_json(const TrainConfig& config) { return to_json<nlohmann::json>(config); }

std::string to_string(const TrainConfig& config) {
  return to_json<nlohmann::ordered_json>(config).dump(2);
}

void resolve_derived_paths(TrainConfig& c) {
  if (c.telemetry.dir.empty()) c.telemetry.dir = "runs/" + c.run_name;
  if (c.checkpoint.dir.empty()) c.checkpoint.dir = c.telemetry.dir + "/ckpt";
  if (c.out.empty()) c.out = c.telemetry.dir + "/model.safetensors";
}

double scaled_lr(const TrainSection& t, int64_t global_batch) {
  if (t.lr_scaling == "none") return t.lr;
  MT_CHECK(t.lr_base_batch >= 1, "train.lr_scaling = \"{}\" needs train.lr_base_batch (the global "
           "batch in sequences at which train.lr was tuned)", t.lr_scaling);
  const double ratio = static_cast<double>(global_batch) / static_cast<double>(t.lr_base_batch);
  if (t.lr_scaling == "linear") return t.lr * ratio;
  if (t.lr_scaling == "sqrt") return t.lr * std::sqrt(ratio);
  fail("train.lr_scaling must be none, linear or sqrt; got \"{}\"", t.lr_scaling);
}

RecomputePolicy parse_recompute(const std::string& value) {
  using Kind = RecomputePolicy::Kind;
  if (value == "none") return {Kind::None, 0};
  if (value == "full") return {Kind::Full, 0};
  if (value == "selective") return {Kind::Selective, 0};
  if (value.rfind("every:", 0) == 0) {
    const std::string k = value.substr(6);
    int every = 0;
    const auto [end, ec] = std::from_chars(k.data(), k.data() + k.size(), every);
    if (ec == std::errc() && end == k.data() + k.size() && every >= 1) return {Kind::EveryK, every};
    fail("recompute 'every:K' needs an integer K >= 1, got \"{}\"", value);
  }
  fail("recompute must be one of none, full, every:K, selective; got \"{}\"", value);
}

}  // namespace meshtrain
