#include "meshtrain/io/model_file.h"

#include "meshtrain/io/gpt_model_file.h"
#include "meshtrain/io/safetensors.h"
#include "meshtrain/nn/gpt_spec.h"

namespace meshtrain {

void save_model_safetensors(const std::string& path, const Model& model) {
  const ModelSpec& spec = model.spec();
  if (spec.family() == GPTSpec::kFamily) {
    const GPTConfig cfg = GPTSpec::config_from_json(spec.to_json(), path);
    save_gpt_safetensors(path, GPTParams::view(cfg, model.param_buffer()), cfg);
    return;
  }
  std::vector<std::pair<std::string, Tensor>> named;
  for (const ParamInfo& p : model.layout().params) named.emplace_back(p.name, model.param(p));
  write_safetensors(path, named, {{"format", "meshtrain-model"}, {"model", spec.to_json().dump()}});
}

}  // namespace meshtrain
