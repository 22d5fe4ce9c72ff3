// JSON (complete: every key present, no unknown ones) -> TrainConfig, with the
// type and range checks. Internal to the config layer; use config_loader.h.
#pragma once
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "meshtrain/config/train_config.h"

namespace meshtrain {

// `origin(path)` names where a key's value came from ("cfg.json", "--set
// train.lr=..."), for messages; it may return "".
TrainConfig convert_config(const nlohmann::json& complete,
                           const std::function<std::string(const std::string&)>& origin);

}  // namespace meshtrain
