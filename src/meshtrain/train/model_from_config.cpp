#include "meshtrain/train/model_from_config.h"

#include "meshtrain/ckpt/checkpoint_dir.h"
#include "meshtrain/ckpt/checkpoint_index.h"
#include "meshtrain/ckpt/model_convert.h"
#include "meshtrain/core/error.h"
#include "meshtrain/io/hf_llama.h"
#include "meshtrain/io/model_file.h"
#include "meshtrain/nn/lora_spec.h"
#include "meshtrain/nn/gpt_spec.h"
#include "meshtrain/nn/llama_spec.h"
#include "meshtrain/nn/model_registry.h"
#include "meshtrain/nn/resnet_spec.h"

namespace meshtrain {

namespace {

void take(int& dst, int v) {
  if (v > 0) dst = v;
}

bool is_llama_preset(const std::string& name) {
  for (const std::string& n : llama_preset_names())
    if (n == name) return true;
  return false;
}

bool is_resnet_preset(const std::string& name) {
  for (const std::string& n : resnet_preset_names())
    if (n == name) return true;
  return false;
}

// The image keys set on a ResNet's shape (0 keeps the preset's).
void shape_resnet(ResNetConfig& r, const ModelSection& m) {
  take(r.num_classes, m.num_classes);
  take(r.image_size, m.image_size);
  take(r.in_channels, m.in_channels);
  take(r.width, m.width);
}

// A ResNet: its preset with the image keys applied, or the shape an
// init_from model file or checkpoint records. The decoder dimensions do not
// apply.
std::shared_ptr<const ModelSpec> resnet_from_config(const TrainConfig& c) {
  const ModelSection& m = c.model;
  MT_CHECK(m.n_layer == 0 && m.n_head == 0 && m.n_embd == 0 && m.seq_len == 0 && m.vocab_size == 0 &&
               m.n_kv_head == 0 && m.ffn_hidden == 0 && m.rope_theta == 0,
           "model.n_layer, n_head, n_embd, seq_len, vocab_size, n_kv_head, ffn_hidden and "
           "rope_theta describe decoders; a resnet is chosen by model.preset ({}) and shaped by "
           "model.num_classes, image_size, in_channels and width", fmt::join(resnet_preset_names(), ", "));
  if (!c.init_from.empty()) {
    std::shared_ptr<const ModelSpec> spec;
    if (is_model_file(c.init_from)) {
      spec = read_model_file_spec(c.init_from);
    } else {
      MT_CHECK(ckpt::is_checkpoint_path(c.init_from), "init_from {}: a resnet starts from a model "
               "file or a checkpoint directory meshtrain wrote", c.init_from);
      spec = model_spec_from_json(ckpt::read_index(ckpt::resolve_step_dir(c.init_from, nullptr)).model,
                                  c.init_from);
    }
    MT_CHECK(spec->family() == ResNetSpec::kFamily, "init_from {} holds a {} model, not a resnet",
             c.init_from, spec->family());
    const ResNetConfig file = ResNetSpec::config_from_json(spec->to_json(), c.init_from);
    ResNetConfig asked = file;
    shape_resnet(asked, m);
    MT_CHECK(asked.num_classes == file.num_classes && asked.image_size == file.image_size &&
                 asked.in_channels == file.in_channels && asked.width == file.width,
             "model.* settings disagree with the model in init_from {} ({}); remove them or "
             "match it", c.init_from, file.describe());
    return spec;
  }
  MT_CHECK(is_resnet_preset(m.preset), "model.preset = \"{}\" is not a resnet preset (resnet "
           "presets: {})", m.preset, fmt::join(resnet_preset_names(), ", "));
  ResNetConfig r = resnet_preset(m.preset);
  shape_resnet(r, m);
  try {
    r.validate();
  } catch (const Error& e) {
    fail("model.preset \"{}\" with model.num_classes / image_size / in_channels / width: {}", m.preset,
         e.what());
  }
  return ResNetSpec::make(r);
}

// The image keys describe image models only.
void refuse_image_keys(const ModelSection& m, const char* family) {
  MT_CHECK(m.num_classes == 0 && m.image_size == 0 && m.in_channels == 0 && m.width == 0,
           "model.num_classes, image_size, in_channels and width describe image models (resnet); "
           "this is a {} model", family);
}

// The family a checkpoint directory records (init_from), or "".
std::string checkpoint_family(const std::string& path) {
  if (path.empty() || !ckpt::is_checkpoint_path(path)) return "";
  const ckpt::CheckpointIndex index = ckpt::read_index(ckpt::resolve_step_dir(path, nullptr));
  return model_spec_from_json(index.model, path)->family();
}

std::shared_ptr<const ModelSpec> gpt_from_config(const TrainConfig& c) {
  refuse_image_keys(c.model, "gpt");
  GPTConfig g;
  if (!c.init_from.empty()) {
    g = ckpt::read_init_config(c.init_from, c.model.n_head);
  } else if (!c.model.preset.empty()) {
    g = gpt_preset(c.model.preset);
  }
  const GPTConfig before = g;
  take(g.n_layer, c.model.n_layer);
  take(g.n_head, c.model.n_head);
  take(g.n_embd, c.model.n_embd);
  take(g.seq_len, c.model.seq_len);
  take(g.vocab_size, c.model.vocab_size);
  if (!c.init_from.empty())
    MT_CHECK(g.n_layer == before.n_layer && g.n_embd == before.n_embd &&
                 g.vocab_size == before.vocab_size && g.seq_len == before.seq_len,
             "model.* settings disagree with the model in init_from {} ({}); remove them or "
             "match the file", c.init_from, before.describe());
  MT_CHECK(c.model.n_kv_head == 0 && c.model.ffn_hidden == 0 && c.model.rope_theta == 0,
           "model.n_kv_head, model.ffn_hidden and model.rope_theta are llama settings; this is "
           "a gpt model (set model.family = \"llama\" or a llama preset)");
  g.padded_vocab = pad_vocab(g.vocab_size);
  g.validate();
  return GPTSpec::make(g);
}

std::shared_ptr<const ModelSpec> llama_from_config(const TrainConfig& c) {
  refuse_image_keys(c.model, "llama");
  LlamaConfig l;
  if (!c.init_from.empty() && is_model_file(c.init_from)) {
    l = LlamaSpec::config_from_json(read_model_file_spec(c.init_from)->to_json(), c.init_from);
  } else if (!c.init_from.empty() && !ckpt::is_checkpoint_path(c.init_from)) {
    MT_CHECK(is_hf_llama(c.init_from), "init_from {}: a llama model starts from a Hugging Face "
             "Llama checkpoint (config.json + model.safetensors), a model file meshtrain wrote, "
             "or a meshtrain checkpoint directory", c.init_from);
    l = read_hf_llama_config(c.init_from);
  } else if (!c.init_from.empty()) {
    const ckpt::CheckpointIndex index =
        ckpt::read_index(ckpt::resolve_step_dir(c.init_from, nullptr));
    l = LlamaSpec::config_from_json(index.model, c.init_from);
  } else if (!c.model.preset.empty()) {
    MT_CHECK(is_llama_preset(c.model.preset), "model.preset = \"{}\" is not a llama preset "
             "(llama presets: {})", c.model.preset, fmt::join(llama_preset_names(), ", "));
    l = llama_preset(c.model.preset);
  } else {
    MT_CHECK(c.model.ffn_hidden > 0, "model.ffn_hidden: a llama model without a preset needs its "
             "SwiGLU width");
  }
  const LlamaConfig before = l;
  take(l.n_layer, c.model.n_layer);
  take(l.n_head, c.model.n_head);
  take(l.n_embd, c.model.n_embd);
  take(l.seq_len, c.model.seq_len);
  take(l.vocab_size, c.model.vocab_size);
  take(l.n_kv_head, c.model.n_kv_head);
  take(l.ffn_hidden, c.model.ffn_hidden);
  if (l.n_kv_head == 0) l.n_kv_head = l.n_head;  // no grouping unless asked
  if (c.model.rope_theta > 0) l.rope_theta = c.model.rope_theta;
  if (!c.init_from.empty())
    MT_CHECK(l.n_layer == before.n_layer && l.n_embd == before.n_embd &&
                 l.n_head == before.n_head && l.n_kv_head == before.n_kv_head &&
                 l.ffn_hidden == before.ffn_hidden && l.vocab_size == before.vocab_size,
             "model.* settings disagree with the model in init_from {} ({}); remove them or "
             "match it", c.init_from, before.describe());
  l.padded_vocab = pad_vocab(l.vocab_size);
  l.validate();
  return LlamaSpec::make(l);
}

}  // namespace

std::shared_ptr<const ModelSpec> base_model_from_config(const TrainConfig& c) {
  std::string family = c.model.family;
  if (family.empty()) family = checkpoint_family(c.init_from);
  if (family.empty() && !c.init_from.empty() && is_hf_llama(c.init_from)) family = "llama";
  if (family.empty() && !c.init_from.empty() && is_model_file(c.init_from))
    family = read_model_file_spec(c.init_from)->family();
  if (family.empty() && is_resnet_preset(c.model.preset)) family = "resnet";
  if (family.empty()) family = is_llama_preset(c.model.preset) ? "llama" : "gpt";
  if (family == "resnet") return resnet_from_config(c);
  if (family == "llama") return llama_from_config(c);
  MT_CHECK(family == "gpt", "model.family = \"{}\": expected gpt, llama or resnet", family);
  MT_CHECK(c.model.family.empty() || !is_llama_preset(c.model.preset), "model.preset = \"{}\" "
           "is a llama preset but model.family = \"gpt\"", c.model.preset);
  return gpt_from_config(c);
}

std::shared_ptr<const ModelSpec> model_from_config(const TrainConfig& c) {
  std::shared_ptr<const ModelSpec> base = base_model_from_config(c);
  if (c.lora.rank == 0) return base;
  LoraConfig lc;
  lc.rank = c.lora.rank;
  lc.alpha = c.lora.alpha;
  lc.targets = LoraConfig::parse_targets(c.lora.targets);
  lc.base_from = c.init_from;
  lc.base_precision = precision_from_name(c.lora.base_dtype);
  return LoraSpec::make(base, lc);
}

}  // namespace meshtrain
