// Every configuration key, described once: its dotted name (docs/CONFIG.md
// documents each), the TrainConfig field it fills and the rule that reads and
// checks it (type, range, choices, a key's own syntax). The JSON form
// (resolved_json, to_string: the keys in this order), the defaults
// (default_config_json: the JSON form of TrainConfig{}), the keys a file or
// --set may name, and convert_config's reading of every key all come from
// this one list; only checks that relate several keys are written out
// (config_convert.cpp). A new key is one entry here, its field in
// train_config.h and its row in docs/CONFIG.md.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "meshtrain/config/config_reader.h"
#include "meshtrain/config/train_config.h"

namespace meshtrain {

struct ConfigKey {
  std::string path;  // "train.lr"
  // The field's value as it is written out ("auto" for parallel.dp = 0).
  std::function<nlohmann::ordered_json(const TrainConfig&)> value;
  // Reads the key from a complete configuration into the field, checking it.
  std::function<void(TrainConfig&, const ConfigReader&)> read;
};

// In the documented order.
const std::vector<ConfigKey>& config_schema();

}  // namespace meshtrain
