#include "meshtrain/nn/model_registry.h"

#include <fmt/format.h>

#include "meshtrain/core/error.h"
#include "meshtrain/nn/gpt_spec.h"
#include "meshtrain/nn/llama_spec.h"
#include "meshtrain/nn/lora_spec.h"
#include "meshtrain/nn/resnet_spec.h"

namespace meshtrain {

namespace {

struct Family {
  const char* name;
  std::shared_ptr<const ModelSpec> (*from_json)(const nlohmann::json& j, const std::string& where);
};

const Family kFamilies[] = {
    {GPTSpec::kFamily,
     [](const nlohmann::json& j, const std::string& where) -> std::shared_ptr<const ModelSpec> {
       return GPTSpec::make(GPTSpec::config_from_json(j, where));
     }},
    {LlamaSpec::kFamily,
     [](const nlohmann::json& j, const std::string& where) -> std::shared_ptr<const ModelSpec> {
       return LlamaSpec::make(LlamaSpec::config_from_json(j, where));
     }},
    {ResNetSpec::kFamily,
     [](const nlohmann::json& j, const std::string& where) -> std::shared_ptr<const ModelSpec> {
       return ResNetSpec::make(ResNetSpec::config_from_json(j, where));
     }},
    // Adapters on a frozen model of another family (its description nested).
    {LoraSpec::kFamily, &LoraSpec::from_json},
};

std::string family_of(const nlohmann::json& j) {
  return j.is_object() && j.contains("family") && j["family"].is_string()
             ? j["family"].get<std::string>()
             : std::string(GPTSpec::kFamily);
}

}  // namespace

std::vector<std::string> model_family_names() {
  std::vector<std::string> out;
  for (const Family& f : kFamilies) out.push_back(f.name);
  return out;
}

std::shared_ptr<const ModelSpec> model_spec_from_json(const nlohmann::json& j,
                                                      const std::string& where) {
  MT_CHECK(j.is_object(), "{}: the model description is not a JSON object", where);
  const std::string family = family_of(j);
  for (const Family& f : kFamilies)
    if (family == f.name) return f.from_json(j, where);
  fail("{}: unknown model family \"{}\" (known: {})", where, family,
       fmt::join(model_family_names(), ", "));
}

std::shared_ptr<const ModelSpec> model_preset(const std::string& name) {
  for (const std::string& n : llama_preset_names())
    if (n == name) return LlamaSpec::make(llama_preset(name));
  for (const std::string& n : gpt_preset_names())
    if (n == name) return GPTSpec::make(gpt_preset(name));
  for (const std::string& n : resnet_preset_names())
    if (n == name) return ResNetSpec::make(resnet_preset(name));
  fail("unknown model preset '{}' (gpt: {}; llama: {}; resnet: {})", name,
       fmt::join(gpt_preset_names(), ", "), fmt::join(llama_preset_names(), ", "),
       fmt::join(resnet_preset_names(), ", "));
}

std::string model_description_difference(const nlohmann::json& saved, const nlohmann::json& want) {
  if (family_of(saved) != family_of(want))
    return fmt::format("family {} (checkpoint) vs {} (model)", family_of(saved), family_of(want));
  // Every field either side has: a setting only the checkpoint records (e.g.
  // rope scaling) is a difference too.
  std::string d;
  auto field = [](const nlohmann::json& j, const std::string& key) {
    return j.contains(key) ? j[key].dump() : std::string("(absent)");
  };
  std::vector<std::string> keys;
  for (const auto& [key, value] : want.items()) keys.push_back(key);
  for (const auto& [key, value] : saved.items())
    if (!want.contains(key)) keys.push_back(key);
  for (const std::string& key : keys) {
    if (key == "family") continue;
    const std::string a = field(saved, key), b = field(want, key);
    if (a != b) d += fmt::format("{}{} {} (checkpoint) vs {} (model)", d.empty() ? "" : ", ", key, a, b);
  }
  return d;
}

}  // namespace meshtrain
