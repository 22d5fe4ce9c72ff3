// Loading a TrainConfig: defaults <- file <- --set overrides, then type and
// range checks. Unknown keys anywhere are errors with a "did you mean".
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "meshtrain/config/train_config.h"

namespace meshtrain {

// path may be "" (defaults only). overrides are "dotted.key=value" strings
// (from --set): value is JSON (numbers, true/false, null, "strings", arrays)
// or, failing that, an unquoted string. Throws meshtrain::Error naming the file
// or override, the key and what is wrong; malformed --set syntax and unknown
// --set keys are meshtrain::UsageError.
TrainConfig load_config(const std::string& path, const std::vector<std::string>& overrides = {});

// Converts and validates JSON (e.g. a configuration saved with a checkpoint):
// missing keys take defaults, unknown keys are errors. `source` names the
// origin in messages.
TrainConfig config_from_json(const nlohmann::json& j, const std::string& source = "config");

// The defaults as JSON (derived paths "").
nlohmann::json default_config_json();

// Parses a JSON file (comments allowed); malformed JSON is an error naming
// file:line:column.
nlohmann::json parse_json_file(const std::string& path);

// Every dotted key path, sections included ("train", "train.lr", ...).
std::vector<std::string> config_key_paths();

}  // namespace meshtrain
