// Model families by name: the one place that turns a description (a
// checkpoint's "model" field, a config's model section, a preset name) into
// a ModelSpec (nn/model.h). Adding a family is one entry in the table in
// model_registry.cpp; nothing above nn/ names a concrete family.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "meshtrain/nn/model.h"

namespace meshtrain {

// From ModelSpec::to_json()'s form: {"family": NAME, ...}; a description
// without "family" is GPT's (checkpoints written before families existed).
// Throws naming `where` for an unknown family or a malformed field.
std::shared_ptr<const ModelSpec> model_spec_from_json(const nlohmann::json& j,
                                                      const std::string& where);
// A named preset of any family (gpt2, char-6L, ...).
std::shared_ptr<const ModelSpec> model_preset(const std::string& name);
std::vector<std::string> model_family_names();

// "" when two descriptions are the same model, else the differing fields
// ("n_layer 2 (checkpoint) vs 4 (model)").
std::string model_description_difference(const nlohmann::json& saved, const nlohmann::json& want);

}  // namespace meshtrain
