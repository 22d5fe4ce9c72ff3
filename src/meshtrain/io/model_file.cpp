#include "meshtrain/io/model_file.h"

#include "meshtrain/io/gpt_model_file.h"
#include "meshtrain/io/safetensors.h"
#include "meshtrain/nn/gpt_spec.h"

namespace meshtrain {

void save_model_safetensors(const std::string& path, const Model& model) {
  save_model_safetensors(path, model.spec(), model.param_buffer());
}

void save_model_safetensors(const std::string& path, const ModelSpec& spec, const Tensor& params) {
  if (spec.family() == GPTSpec::kFamily) {
    const GPTConfig cfg = GPTSpec::config_from_json(spec.to_json(), path);
    save_gpt_safetensors(path, GPTParams::view(cfg, params), cfg);
    return;
  }
  std::vector<std::pair<std::string, Tensor>> named;
  for (const ParamInfo& p : spec.layout().params)
    named.emplace_back(p.name, params.slice_flat(p.begin, p.numel()).reshape(p.shape));
  write_safetensors(path, named, {{"format", "meshtrain-model"}, {"model", spec.to_json().dump()}});
}

}  // namespace meshtrain
