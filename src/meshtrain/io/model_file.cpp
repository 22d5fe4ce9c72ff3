#include "meshtrain/io/model_file.h"

#include "meshtrain/io/gpt_model_file.h"
#include "meshtrain/io/safetensors.h"
#include "meshtrain/nn/gpt_spec.h"
#include "meshtrain/nn/model_registry.h"

#include <filesystem>
#include <set>

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

namespace {
constexpr const char* kModelFormat = "meshtrain-model";
}  // namespace

bool is_model_file(const std::string& path) {
  if (!std::filesystem::is_regular_file(path)) return false;
  try {
    const SafetensorsFile f = SafetensorsFile::open(path);
    auto it = f.metadata().find("format");
    return it != f.metadata().end() && it->second == kModelFormat;
  } catch (const Error&) {
    return false;
  }
}

std::shared_ptr<const ModelSpec> read_model_file_spec(const std::string& path) {
  const SafetensorsFile f = SafetensorsFile::open(path);
  auto it = f.metadata().find("model");
  MT_CHECK(it != f.metadata().end(), "{}: no model description in the metadata", path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(it->second);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: the model description is not JSON ({})", path, e.what());
  }
  return model_spec_from_json(j, path);
}

void load_model_file(const std::string& path, const ModelSpec& spec, const Tensor& params) {
  load_model_file(path, spec, BufferWindow::whole(params));
}

void load_model_file(const std::string& path, const ModelSpec& spec, const BufferWindow& window) {
  window.check_fits(spec.num_params(), path);
  const SafetensorsFile f = SafetensorsFile::open(path);
  std::set<std::string> used;
  for (const ParamInfo& p : spec.layout().params) {
    MT_CHECK(f.contains(p.name), "{}: tensor {} is missing", path, p.name);
    MT_CHECK(f.info(p.name).shape == p.shape, "{}: {} has shape {}, expected {}", path, p.name,
             shape_str(f.info(p.name).shape), shape_str(p.shape));
    window.put(p, [&](const Tensor& dst) { f.read_into(p.name, dst); });
    used.insert(p.name);
  }
  for (const std::string& n : f.names())
    MT_CHECK(used.count(n), "{}: unexpected tensor {} (not part of {})", path, n, spec.describe());
}

}  // namespace meshtrain
