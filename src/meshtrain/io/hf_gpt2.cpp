#include "meshtrain/io/hf_gpt2.h"

#include <cstring>
#include <map>
#include <regex>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "meshtrain/core/error.h"
#include "meshtrain/core/json_integer.h"
#include "meshtrain/io/gpt_model_file.h"
#include "meshtrain/io/model_file_util.h"
#include "meshtrain/nn/gpt_spec.h"

namespace meshtrain {

using namespace io_detail;

namespace {

const std::regex kLayerName(R"(^h\.(\d+)\.(.+)$)");

// Conv1D weights, which Hugging Face stores (in, out).
bool is_conv1d_weight(const std::string& name) {
  for (const char* s : {".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight",
                        ".mlp.c_proj.weight"}) {
    size_t n = std::strlen(s);
    if (name.size() >= n && name.compare(name.size() - n, n, s) == 0) return true;
  }
  return false;
}

// Buffers GPT2LMHeadModel saves that are not parameters (causal masks).
bool is_ignored_buffer(const std::string& name) {
  std::smatch m;
  return std::regex_match(name, m, kLayerName) &&
         (m[2] == "attn.bias" || m[2] == "attn.masked_bias");
}

// Our name -> name in the file, with the optional "transformer." prefix dropped.
std::map<std::string, std::string> normalized_names(const SafetensorsFile& f) {
  static const std::string prefix = "transformer.";
  std::map<std::string, std::string> out;
  for (const auto& n : f.names()) {
    std::string key = n.rfind(prefix, 0) == 0 ? n.substr(prefix.size()) : n;
    MT_CHECK(out.emplace(key, n).second, "model file {}: tensor {} appears twice ({} and {})",
             f.path(), key, out[key], n);
  }
  return out;
}

int known_gpt2_heads(int n_embd) {
  switch (n_embd) {
    case 768: return 12;
    case 1024: return 16;
    case 1280: return 20;
    case 1600: return 25;
  }
  return 0;
}

}  // namespace

// The head count from a Hugging Face config.json beside the weights (as
// checkpoints are published: config.json + model.safetensors), or 0.
static int config_json_heads(const std::string& weights_path) {
  const std::filesystem::path cfg = std::filesystem::path(weights_path).parent_path() / "config.json";
  std::ifstream in(cfg);
  if (!in) return 0;
  nlohmann::json j;
  try {
    in >> j;
  } catch (const nlohmann::json::exception& e) {
    fail("{} beside model file {} is not valid JSON: {}", cfg.string(), weights_path, e.what());
  }
  for (const char* key : {"n_head", "num_attention_heads"}) {
    if (!j.contains(key) || !j[key].is_number_integer()) continue;
    const auto heads = json_integer_in(j[key], 1, int64_t{1} << 20);  // get<int>(): 2^32 + 2 reads 2
    MT_CHECK(heads, "{} beside model file {}: {} = {} is not a head count", cfg.string(), weights_path,
             key, j[key].dump());
    return static_cast<int>(*heads);
  }
  return 0;
}

GPTConfig hf_gpt2_config(const SafetensorsFile& f, int n_head_hint) {
  const std::string& path = f.path();
  auto names = normalized_names(f);
  auto shape_of = [&](const std::string& key) -> Shape {
    auto it = names.find(key);
    MT_CHECK(it != names.end(),
             "model file {}: no {} tensor, so it is neither a meshtrain nor a Hugging Face GPT-2 "
             "model file",
             path, key);
    Shape s = f.info(it->second).shape;
    MT_CHECK(s.size() == 2, "model file {}: {} has shape {}, expected 2 dimensions", path, key,
             shape_str(s));
    return s;
  };
  Shape wte = shape_of("wte.weight"), wpe = shape_of("wpe.weight");
  GPTConfig c;
  c.vocab_size = static_cast<int>(wte[0]);
  c.n_embd = static_cast<int>(wte[1]);
  c.seq_len = static_cast<int>(wpe[0]);
  c.padded_vocab = pad_vocab(c.vocab_size);
  std::set<int> layers;
  for (const auto& [key, name] : names) {
    std::smatch m;
    if (std::regex_match(key, m, kLayerName)) layers.insert(std::stoi(m[1]));
  }
  c.n_layer = static_cast<int>(layers.size());
  MT_CHECK(c.n_layer > 0 && *layers.rbegin() == c.n_layer - 1,
           "model file {}: transformer blocks h.N are not numbered 0..{}", path, c.n_layer - 1);

  int recorded = metadata_int(path, f.metadata(), "n_head");
  if (recorded <= 0) recorded = config_json_heads(path);
  if (recorded > 0) {
    MT_CHECK(n_head_hint <= 0 || n_head_hint == recorded,
             "model file {} records n_head={} but n_head={} was requested", path, recorded,
             n_head_hint);
    c.n_head = recorded;
  } else if (n_head_hint > 0) {
    c.n_head = n_head_hint;
  } else {
    c.n_head = known_gpt2_heads(c.n_embd);
    MT_CHECK(c.n_head > 0,
             "model file {}: the number of attention heads is not stored in Hugging Face weights "
             "and n_embd={} is not a GPT-2 size; set model.n_head",
             path, c.n_embd);
  }
  try {
    c.validate();
  } catch (const Error& e) {
    fail("model file {}: inferred an invalid model ({}): {}", path, c.describe(), e.what());
  }
  return c;
}

// Each parameter by the layout's ParamInfo (our names), so a window writes
// all of them or one range / tp shard of them.
void load_hf_gpt2(const SafetensorsFile& f, const BufferWindow& window, const GPTConfig& cfg) {
  const std::string& path = f.path();
  int recorded = metadata_int(path, f.metadata(), "n_head");
  MT_CHECK(recorded <= 0 || recorded == cfg.n_head,
           "model file {} records n_head={} but the config needs {}", path, recorded, cfg.n_head);
  auto names = normalized_names(f);
  std::set<std::string> used;
  const auto spec = GPTSpec::make(cfg);  // alive through the loop: the layout is its member
  for (const ParamInfo& p : spec->layout().params) {
    const std::string& name = p.name;
    auto it = names.find(name);
    MT_CHECK(it != names.end(), "model file {}: tensor {} is missing ({} needs it)", path, name,
             cfg.describe());
    const std::string& file_name = it->second;
    used.insert(name);
    const Shape& found = f.info(file_name).shape;
    if (name == "wte.weight") {
      check_shape(path, name, found, {cfg.vocab_size, cfg.n_embd});
      window.put(p, [&](const Tensor& t) { copy_vocab_rows(read_f32(f, file_name), t, cfg.vocab_size); });
    } else if (is_conv1d_weight(name)) {  // Conv1D: stored (in, out)
      check_shape(path, name, found, {p.shape[1], p.shape[0]});
      window.put(p, [&](const Tensor& t) { Tensor(t).copy_from(transpose2d(read_f32(f, file_name))); });
    } else {
      check_shape(path, name, found, p.shape);
      window.put(p, [&](const Tensor& t) { read_weight_into(f, file_name, t); });
    }
  }
  for (const auto& [key, file_name] : names) {
    if (used.count(key) || is_ignored_buffer(key)) continue;
    if (key == "lm_head.weight") {
      // Tied to wte in GPT-2; an untied head would be silently lost, so refuse it.
      check_shape(path, key, f.info(file_name).shape, {cfg.vocab_size, cfg.n_embd});
      Tensor head = read_f32(f, file_name);
      Tensor wte = read_f32(f, names.at("wte.weight"));
      MT_CHECK(std::memcmp(head.raw(), wte.raw(), head.nbytes()) == 0,
               "model file {}: lm_head.weight differs from wte.weight; meshtrain ties the output "
               "head to the token embedding",
               path);
      continue;
    }
    fail("model file {}: unexpected tensor {} (not part of {})", path, file_name, cfg.describe());
  }
}

void export_hf_gpt2(const std::string& path, const GPTParams& params, const GPTConfig& cfg) {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& [name, t] : params.named()) {
    if (name == "wte.weight") {
      const int64_t n = int64_t{cfg.vocab_size} * cfg.n_embd;
      out.emplace_back(name, as_f32(t.slice_flat(0, n).reshape({cfg.vocab_size, cfg.n_embd})));
    } else if (is_conv1d_weight(name)) {
      out.emplace_back(name, transpose2d(as_f32(t)));
    } else {
      out.emplace_back(name, as_f32(t));
    }
  }
  // transformers refuses safetensors whose metadata lacks format "pt".
  auto meta = config_metadata(cfg);
  meta["format"] = "pt";
  write_safetensors(path, out, meta);
}

}  // namespace meshtrain
