#include "meshtrain/io/hf_llama.h"

#include <filesystem>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "meshtrain/core/error.h"
#include "meshtrain/core/json_integer.h"
#include "meshtrain/io/atomic_file.h"
#include "meshtrain/io/safetensors.h"
#include "meshtrain/nn/gpt_config.h"
#include "meshtrain/nn/llama_spec.h"

namespace meshtrain {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// The directory holding config.json: `path` itself, or the file's folder.
fs::path model_dir(const std::string& path) {
  const fs::path p(path);
  return fs::is_directory(p) ? p : p.parent_path();
}

json read_json(const fs::path& p) {
  std::ifstream in(p);
  MT_CHECK(in.good(), "{}: cannot read", p.string());
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    fail("{}: not valid JSON ({})", p.string(), e.what());
  }
}

// tensor name -> the safetensors file that holds it.
std::map<std::string, std::string> weight_files(const std::string& path) {
  std::map<std::string, std::string> out;
  const fs::path p(path);
  std::vector<fs::path> files;
  if (!fs::is_directory(p)) {
    files.push_back(p);
  } else if (fs::exists(p / "model.safetensors.index.json")) {
    const json idx = read_json(p / "model.safetensors.index.json");
    MT_CHECK(idx.contains("weight_map") && idx["weight_map"].is_object(),
             "{}: no weight_map", (p / "model.safetensors.index.json").string());
    std::set<std::string> names;
    for (const auto& [name, file] : idx["weight_map"].items()) {
      MT_CHECK(file.is_string(), "{}: weight_map[{}] is not a file name",
               (p / "model.safetensors.index.json").string(), name);
      names.insert(file.get<std::string>());
    }
    for (const auto& f : names) files.push_back(p / f);
  } else {
    files.push_back(p / "model.safetensors");
  }
  for (const fs::path& f : files) {
    const SafetensorsFile sf = SafetensorsFile::open(f.string());
    for (const std::string& n : sf.names()) out[n] = f.string();
  }
  return out;
}

}  // namespace

bool is_hf_llama(const std::string& path) {
  const fs::path cfg = model_dir(path) / "config.json";
  if (!fs::exists(cfg)) return false;
  try {
    const json j = read_json(cfg);
    if (!j.is_object()) return false;
    const json type = j.value("model_type", json());
    if (type.is_string() && type.get<std::string>() == "llama") return true;
    const json archs = j.value("architectures", json());
    if (archs.is_array())
      for (const auto& a : archs)
        if (a.is_string() && a.get<std::string>().find("Llama") != std::string::npos) return true;
  } catch (const Error&) {
  } catch (const json::exception&) {
  }
  return false;
}

namespace {
LlamaConfig parse_hf_llama_config(const json& j, const fs::path& p);
}  // namespace

LlamaConfig read_hf_llama_config(const std::string& path) {
  const fs::path p = model_dir(path) / "config.json";
  MT_CHECK(fs::exists(p), "{}: a Hugging Face Llama checkpoint needs its config.json beside the "
           "weights", p.string());
  const json j = read_json(p);
  MT_CHECK(j.is_object(), "{}: not a JSON object", p.string());
  try {
    return parse_hf_llama_config(j, p);
  } catch (const json::exception& e) {  // a field of the wrong type
    fail("{}: {}", p.string(), e.what());
  }
}

namespace {
LlamaConfig parse_hf_llama_config(const json& j, const fs::path& p) {
  // An integer that fits (core/json_integer.h): get<int>() of 4294967298
  // would read 2.
  auto int_value = [&](const json& v, const char* key) {
    const auto i = json_integer_in(v, 0, int64_t{1} << 30);
    MT_CHECK(i, "{}: \"{}\" must be an integer in [0, 2^30], got {}", p.string(), key, v.dump());
    return static_cast<int>(*i);
  };
  auto get_int = [&](const char* key) {
    MT_CHECK(j.contains(key), "{}: needs an integer \"{}\"", p.string(), key);
    return int_value(j[key], key);
  };
  MT_CHECK(!j.value("tie_word_embeddings", false), "{}: tie_word_embeddings = true (a tied "
           "head, as Llama 3.2 1B/3B have) is not supported yet by the llama family, whose "
           "lm_head is its own tensor", p.string());
  MT_CHECK(!j.value("attention_bias", false) && !j.value("mlp_bias", false),
           "{}: attention_bias / mlp_bias are not supported (Llama has no biases)", p.string());
  const std::string act = j.value("hidden_act", "silu");
  MT_CHECK(act == "silu", "{}: hidden_act \"{}\" is not supported (silu)", p.string(), act);
  LlamaConfig c;
  c.n_layer = get_int("num_hidden_layers");
  c.n_head = get_int("num_attention_heads");
  c.n_kv_head = j.contains("num_key_value_heads") && !j["num_key_value_heads"].is_null()
                    ? get_int("num_key_value_heads")
                    : c.n_head;
  c.n_embd = get_int("hidden_size");
  c.ffn_hidden = get_int("intermediate_size");
  c.seq_len = get_int("max_position_embeddings");
  c.vocab_size = get_int("vocab_size");
  c.padded_vocab = pad_vocab(c.vocab_size);
  // transformers 4 writes rope_theta and rope_scaling; 5 writes both into
  // rope_parameters {rope_theta, rope_type, factor, ...}.
  json rope = j.contains("rope_parameters") ? j["rope_parameters"] : j.value("rope_scaling", json());
  if (!rope.is_object()) rope = json::object();  // rope_scaling: null
  c.rope_theta = j.contains("rope_theta") ? j["rope_theta"].get<double>()
                                          : rope.value("rope_theta", 10000.0);
  c.norm_eps = j.value("rms_norm_eps", 1e-6f);

  const std::string rope_type = rope.value("rope_type", rope.value("type", std::string("default")));
  if (rope_type != "default") {
    const json& s = rope;
    MT_CHECK(rope_type == "llama3", "{}: rope type \"{}\" is not supported (default, llama3)",
             p.string(), rope_type);
    const char* kOrig = "original_max_position_embeddings";
    c.rope_scaling = {s.value("factor", 8.0), s.value("low_freq_factor", 1.0),
                      s.value("high_freq_factor", 4.0),
                      s.contains(kOrig) ? int_value(s[kOrig], kOrig) : 8192};
  }
  try {
    c.validate();
  } catch (const Error& e) {
    fail("{}: {}", p.string(), e.what());
  }
  if (j.contains("head_dim") && j["head_dim"].is_number_integer())
    MT_CHECK(j["head_dim"].get<int64_t>() == c.head_dim(), "{}: head_dim {} is not hidden_size / "
             "num_attention_heads = {}", p.string(), j["head_dim"].get<int64_t>(), c.head_dim());
  return c;
}
}  // namespace

void load_hf_llama_weights(const std::string& path, const Tensor& params, const LlamaConfig& cfg) {
  load_hf_llama_weights(path, BufferWindow::whole(params), cfg);
}

void load_hf_llama_weights(const std::string& path, const BufferWindow& window, const LlamaConfig& cfg) {
  const auto spec = LlamaSpec::make(cfg);
  window.check_fits(spec->num_params(), path);
  const auto files = weight_files(path);
  std::map<std::string, SafetensorsFile> open;
  auto file_of = [&](const std::string& name) -> const SafetensorsFile& {
    auto it = files.find(name);
    MT_CHECK(it != files.end(), "{}: tensor {} is missing", path, name);
    auto o = open.find(it->second);
    if (o == open.end()) o = open.emplace(it->second, SafetensorsFile::open(it->second)).first;
    return o->second;
  };
  std::set<std::string> used;
  const int64_t V = cfg.vocab_size;
  for (const ParamInfo& p : spec->layout().params) {
    const SafetensorsFile& f = file_of(p.name);
    used.insert(p.name);
    const bool vocab_rows = p.name == "model.embed_tokens.weight" || p.name == "lm_head.weight";
    if (vocab_rows) {
      const Shape want{V, p.shape[1]};
      MT_CHECK(f.info(p.name).shape == want, "{}: {} has shape {}, expected ({}, {})", f.path(),
               p.name, shape_str(f.info(p.name).shape), V, p.shape[1]);
      window.put(p, [&](const Tensor& dst) {
        Tensor(dst).zero_();  // padding rows stay zero (a view of the same storage)
        f.read_into(p.name, dst.slice_flat(0, V * p.shape[1]).reshape(want));
      });
      continue;
    }
    MT_CHECK(f.info(p.name).shape == p.shape, "{}: {} has shape {}, expected {}", f.path(), p.name,
             shape_str(f.info(p.name).shape), shape_str(p.shape));
    window.put(p, [&](const Tensor& dst) { f.read_into(p.name, dst); });
  }
  for (const auto& [name, file] : files)
    MT_CHECK(used.count(name) || name.find("rotary_emb.inv_freq") != std::string::npos,
             "{}: unexpected tensor {} (not part of a {}-layer Llama)", file, name, cfg.n_layer);
}

void export_hf_llama(const std::string& dir, const Tensor& params, const LlamaConfig& cfg) {
  const auto spec = LlamaSpec::make(cfg);
  MT_CHECK(params.numel() == spec->num_params() && params.dtype() == DType::F32,
           "export: parameter buffer of {} {} for a model of {} f32", params.numel(),
           dtype_name(params.dtype()), spec->num_params());
  fs::create_directories(dir);
  std::vector<std::pair<std::string, Tensor>> named;
  for (const ParamInfo& p : spec->layout().params) {
    Tensor t = params.slice_flat(p.begin, p.numel()).reshape(p.shape);
    if (p.name == "model.embed_tokens.weight" || p.name == "lm_head.weight")
      t = params.slice_flat(p.begin, int64_t{cfg.vocab_size} * p.shape[1])
              .reshape({cfg.vocab_size, p.shape[1]});
    named.emplace_back(p.name, t);
  }
  // transformers refuses safetensors whose metadata lacks format "pt".
  write_safetensors((fs::path(dir) / "model.safetensors").string(), named, {{"format", "pt"}});
  json j = {{"architectures", {"LlamaForCausalLM"}},
            {"model_type", "llama"},
            {"hidden_size", cfg.n_embd},
            {"intermediate_size", cfg.ffn_hidden},
            {"num_hidden_layers", cfg.n_layer},
            {"num_attention_heads", cfg.n_head},
            {"num_key_value_heads", cfg.n_kv_head},
            {"head_dim", cfg.head_dim()},
            {"max_position_embeddings", cfg.seq_len},
            {"vocab_size", cfg.vocab_size},
            {"rms_norm_eps", cfg.norm_eps},
            {"rope_theta", cfg.rope_theta},
            {"hidden_act", "silu"},
            {"tie_word_embeddings", false},
            {"attention_bias", false},
            {"mlp_bias", false},
            {"torch_dtype", "float32"}};
  if (cfg.rope_scaling.factor > 0)
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", cfg.rope_scaling.factor},
                         {"low_freq_factor", cfg.rope_scaling.low_freq_factor},
                         {"high_freq_factor", cfg.rope_scaling.high_freq_factor},
                         {"original_max_position_embeddings",
                          cfg.rope_scaling.original_max_positions}};
  const std::string text = j.dump(2) + "\n";
  write_file_atomic((fs::path(dir) / "config.json").string(), text.data(), text.size());
}

}  // namespace meshtrain
