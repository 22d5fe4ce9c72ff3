#include "meshtrain/nn/model_registry.h"

#include <fmt/format.h>

#include "meshtrain/core/error.h"
#include "meshtrain/nn/gpt_spec.h"
#include "meshtrain/nn/llama_spec.h"

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
  return GPTSpec::make(gpt_preset(name));
}

std::string model_description_difference(const nlohmann::json& saved, const nlohmann::json& want) {
  if (family_of(saved) != family_of(want))
    return fmt::format("family {} (checkpoint) vs {} (model)", family_of(saved), family_of(want));
  std::string d;
  for (const auto& [key, value] : want.items()) {
    if (key == "family") continue;
    const std::string mine = saved.contains(key) ? saved[key].dump() : "(absent)";
    if (mine != value.dump())
      d += fmt::format("{}{} {} (checkpoint) vs {} (model)", d.empty() ? "" : ", ", key, mine,
                       value.dump());
  }
  return d;
}

}  // namespace meshtrain
