#include "meshtrain/io/gpt_model_file.h"

#include <filesystem>
#include <set>

#include "meshtrain/core/error.h"
#include "meshtrain/io/hf_gpt2.h"
#include "meshtrain/io/llmc_model.h"
#include "meshtrain/io/model_file_util.h"
#include "meshtrain/io/safetensors.h"
#include "meshtrain/nn/gpt_spec.h"

namespace meshtrain {

using namespace io_detail;

namespace {

constexpr const char* kFormatTag = "meshtrain-gpt";

bool is_meshtrain_file(const SafetensorsFile& f) {
  auto it = f.metadata().find("format");
  return it != f.metadata().end() && it->second == kFormatTag;
}

GPTConfig meshtrain_config(const SafetensorsFile& f) {
  GPTConfig c;
  auto get = [&](const char* key) {
    int v = metadata_int(f.path(), f.metadata(), key);
    MT_CHECK(v >= 0, "model file {}: metadata lacks '{}'", f.path(), key);
    return v;
  };
  c.n_layer = get("n_layer");
  c.n_head = get("n_head");
  c.n_embd = get("n_embd");
  c.seq_len = get("seq_len");
  c.vocab_size = get("vocab_size");
  c.padded_vocab = get("padded_vocab");
  try {
    c.validate();
  } catch (const Error& e) {
    fail("model file {}: metadata describes an invalid model: {}", f.path(), e.what());
  }
  return c;
}

// Our format's tensors carry the layout's names (nn/gpt_spec.cpp), so the
// window writes each parameter by its ParamInfo: all of them, or one range.
void load_meshtrain(const SafetensorsFile& f, const BufferWindow& window, const GPTConfig& cfg) {
  // The padded vocabulary may differ (only the real rows matter); all else must agree.
  check_same_config(f.path(), meshtrain_config(f), cfg, /*check_padded_vocab=*/false);
  std::set<std::string> expected;
  const auto spec = GPTSpec::make(cfg);  // alive through the loop: the layout is its member
  for (const ParamInfo& p : spec->layout().params) {
    const std::string& name = p.name;
    expected.insert(name);
    MT_CHECK(f.contains(name), "model file {}: tensor {} is missing", f.path(), name);
    const Shape& found = f.info(name).shape;
    if (name == "wte.weight") {
      // Any padding of at least vocab_size rows will do.
      if (found.size() != 2 || found[0] < cfg.vocab_size) check_shape(f.path(), name, found, p.shape);
      check_shape(f.path(), name, found, {found[0], cfg.n_embd});
      window.put(p, [&](const Tensor& dst) { copy_vocab_rows(read_f32(f, name), dst, cfg.vocab_size); });
    } else {
      check_shape(f.path(), name, found, p.shape);
      window.put(p, [&](const Tensor& dst) { read_weight_into(f, name, dst); });
    }
  }
  for (const auto& name : f.names())
    MT_CHECK(expected.count(name), "model file {}: unexpected tensor {} (not part of {})",
             f.path(), name, cfg.describe());
}

}  // namespace

std::string_view model_file_format_name(ModelFileFormat f) {
  switch (f) {
    case ModelFileFormat::Meshtrain: return "meshtrain safetensors";
    case ModelFileFormat::HuggingFace: return "Hugging Face GPT-2 safetensors";
    case ModelFileFormat::LlmC: return "llm.c model";
  }
  return "?";
}

ModelFileFormat detect_model_file_format(const std::string& path) {
  if (is_llmc_model(path)) return ModelFileFormat::LlmC;
  auto f = SafetensorsFile::open(path);
  return is_meshtrain_file(f) ? ModelFileFormat::Meshtrain : ModelFileFormat::HuggingFace;
}

GPTConfig read_gpt_config(const std::string& path, int n_head_hint) {
  GPTConfig c;
  if (is_llmc_model(path)) {
    c = read_llmc_config(path);
  } else {
    auto f = SafetensorsFile::open(path);
    if (!is_meshtrain_file(f)) return hf_gpt2_config(f, n_head_hint);
    c = meshtrain_config(f);
  }
  MT_CHECK(n_head_hint <= 0 || n_head_hint == c.n_head,
           "model file {} has n_head={} but n_head={} was requested", path, c.n_head, n_head_hint);
  return c;
}

void load_gpt_weights(const std::string& path, const GPTParams& dst, const GPTConfig& cfg) {
  MT_CHECK(dst.flat.numel() == cfg.num_params(),
           "loading {}: parameter buffer has {} elements but the config needs {}", path,
           dst.flat.numel(), cfg.num_params());
  if (is_llmc_model(path)) return load_llmc_model(path, dst, cfg);
  auto f = SafetensorsFile::open(path);
  if (is_meshtrain_file(f)) return load_meshtrain(f, BufferWindow::whole(dst.flat), cfg);
  load_hf_gpt2(f, BufferWindow::whole(dst.flat), cfg);
}

bool gpt_file_reads_by_range(const std::string& path) {
  if (!std::filesystem::is_regular_file(path) || is_llmc_model(path)) return false;
  try {
    SafetensorsFile::open(path);  // ours or Hugging Face GPT-2: both by tensor
    return true;
  } catch (const Error&) {
    return false;  // not a model file at all: load_gpt_weights names what is wrong
  }
}

void load_gpt_weights(const std::string& path, const BufferWindow& window, const GPTConfig& cfg) {
  if (window.is_whole()) return load_gpt_weights(path, GPTParams::view(cfg, window.flat), cfg);
  MT_CHECK(!is_llmc_model(path), "{}: an {} file loads whole only", path,
           model_file_format_name(ModelFileFormat::LlmC));
  window.check_fits(cfg.num_params(), path);
  const SafetensorsFile f = SafetensorsFile::open(path);  // names what is wrong with a bad file
  if (is_meshtrain_file(f)) return load_meshtrain(f, window, cfg);
  load_hf_gpt2(f, window, cfg);
}

void save_gpt_safetensors(const std::string& path, const GPTParams& params, const GPTConfig& cfg) {
  auto named = params.named();
  for (auto& [name, t] : named) t = as_f32(t);
  auto meta = config_metadata(cfg);
  meta["format"] = kFormatTag;
  write_safetensors(path, named, meta);
}

}  // namespace meshtrain
