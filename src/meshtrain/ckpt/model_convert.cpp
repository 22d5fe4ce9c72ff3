#include "meshtrain/ckpt/model_convert.h"

#include <filesystem>

#include "meshtrain/ckpt/checkpoint_dir.h"
#include "meshtrain/ckpt/checkpoint_writer.h"
#include "meshtrain/ckpt/model_checkpoint.h"
#include "meshtrain/io/hf_llama.h"
#include "meshtrain/io/model_file.h"
#include "meshtrain/nn/gpt_spec.h"
#include "meshtrain/nn/llama_spec.h"
#include "meshtrain/nn/model_registry.h"
#include "meshtrain/core/device_runtime.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/half.h"
#include "meshtrain/io/gpt_model_file.h"

namespace meshtrain::ckpt {

ExportFormat parse_export_format(const std::string& name) {
  if (name == "hf" || name == "huggingface") return ExportFormat::HuggingFace;
  if (name == "meshtrain") return ExportFormat::Meshtrain;
  throw UsageError("unknown export format '" + name + "' (expected hf or meshtrain)");
}

namespace {

// Writes a whole model (its family's layout, f32) in `format`.
void write_model(const ModelSpec& spec, const Tensor& flat, const std::string& out_path,
                 ExportFormat format, const std::string& where) {
  if (spec.family() == GPTSpec::kFamily) {
    const GPTConfig cfg = GPTSpec::config_from_json(spec.to_json(), where);
    cfg.validate();
    const GPTParams params = GPTParams::view(cfg, flat);
    if (format == ExportFormat::HuggingFace)
      export_hf_gpt2(out_path, params, cfg);
    else
      save_gpt_safetensors(out_path, params, cfg);
    return;
  }
  if (format == ExportFormat::HuggingFace && spec.family() == LlamaSpec::kFamily)
    export_hf_llama(out_path, flat, LlamaSpec::config_from_json(spec.to_json(), where));
  else
    save_model_safetensors(out_path, spec, flat);
}

}  // namespace

void export_checkpoint(const std::string& step_dir, const std::string& out_path, ExportFormat format,
                       bool verify, const std::string& lora_base) {
  CheckpointReader reader = CheckpointReader::open(step_dir, {verify});
  std::shared_ptr<const ModelSpec> spec = model_spec_from_json(reader.index().model, step_dir);
  const BufferEntry* b = reader.index().find_buffer(kParams);
  MT_CHECK(b, "checkpoint {}: no '{}' buffer to export", step_dir, kParams);
  MT_CHECK(b->dtype == DType::F32 && b->numel == spec->num_params(),
           "checkpoint {}: parameter buffer ({} elements of {}) does not fit the model ({} f32)",
           step_dir, b->numel, dtype_name(b->dtype), spec->num_params());
  Tensor flat = Tensor::zeros({spec->num_params()}, DType::F32);
  reader.read(kParams, {0, spec->num_params()}, flat.raw());
  if (spec->frozen_base()) {
    // LoRA: the adapters merged into their frozen base, read again from
    // where the run read it (or --base).
    const std::string recorded = reader.index().model.value("base_from", std::string());
    const std::string base = lora_base.empty() ? recorded : lora_base;
    MT_CHECK(!base.empty(), "checkpoint {} holds LoRA adapters on a base that was not read from a "
             "file (the run had no init_from): pass its base with --base", step_dir);
    MT_CHECK(std::filesystem::exists(base), "checkpoint {} holds LoRA adapters on the base {}, "
             "which is not there: pass the base's current place with --base", step_dir, base);
    auto model = spec->build();
    // A base the run held in 16 bits only merges as the run did (its
    // matrices' 16-bit values), so the export equals the run's model file.
    if (is_mixed(spec->frozen_precision())) model->set_precision(spec->frozen_precision());
    load_init_weights(base, *model->frozen_base());
    model->weights_loaded();
    flat = model->merged_parameters(flat);
    spec = spec->frozen_base();
  }
  write_model(*spec, flat, out_path, format, step_dir);
}

std::string import_model_file(const std::string& model_path, const std::string& root, int n_head_hint) {
  std::shared_ptr<const ModelSpec> spec;
  Tensor flat;
  std::string format;
  if (is_model_file(model_path)) {  // any family, written by meshtrain
    spec = read_model_file_spec(model_path);
    flat = Tensor::zeros({spec->num_params()}, DType::F32);
    load_model_file(model_path, *spec, flat);
    format = "meshtrain-model";
  } else if (is_hf_llama(model_path)) {
    const LlamaConfig cfg = read_hf_llama_config(model_path);
    spec = LlamaSpec::make(cfg);
    flat = Tensor::zeros({spec->num_params()}, DType::F32);
    load_hf_llama_weights(model_path, flat, cfg);
    format = "huggingface-llama";
  } else {
    const GPTConfig cfg = read_gpt_config(model_path, n_head_hint);
    spec = GPTSpec::make(cfg);
    flat = Tensor::zeros({cfg.num_params()}, DType::F32);
    load_gpt_weights(model_path, GPTParams::view(cfg, flat), cfg);
    format = std::string(model_file_format_name(detect_model_file_format(model_path)));
  }
  SaveRequest req = model_save_request(0, *spec, flat, nullptr);
  req.config = {{"imported_from", model_path}, {"format", format}};
  WriterOptions opt;
  opt.root = root;
  opt.async = false;
  opt.keep_last = 0;
  CheckpointWriter writer(opt, nullptr);
  writer.save(req);
  return writer.stats().back().dir;
}

bool is_checkpoint_path(const std::string& path) {
  // A Hugging Face model directory (config.json of a Llama) is a model, not a checkpoint.
  return std::filesystem::is_directory(path) && !is_hf_llama(path);
}

GPTConfig read_init_config(const std::string& path, int n_head_hint) {
  if (!is_checkpoint_path(path)) return read_gpt_config(path, n_head_hint);
  const CheckpointIndex index = read_index(resolve_step_dir(path, nullptr));  // warned at load
  const GPTConfig cfg = GPTSpec::config_from_json(index.model, path);
  MT_CHECK(n_head_hint <= 0 || n_head_hint == cfg.n_head,
           "checkpoint {} has n_head={} but n_head={} was requested", path, cfg.n_head, n_head_hint);
  return cfg;
}

std::string load_init_weights(const std::string& path, const GPTParams& dst, const GPTConfig& cfg) {
  if (!is_checkpoint_path(path)) {
    load_gpt_weights(path, dst, cfg);
    return path;
  }
  const std::string dir = resolve_step_dir(path);
  CheckpointReader reader = CheckpointReader::open(dir);
  reader.check_model(*GPTSpec::make(cfg));
  const BufferEntry* b = reader.index().find_buffer(kParams);
  MT_CHECK(b && b->dtype == DType::F32, "checkpoint {}: no f32 '{}' buffer to start from", dir, kParams);
  const int64_t n = cfg.num_params();
  MT_CHECK(dst.flat.numel() == n, "init_from {}: parameter buffer has {} elements but the model "
           "needs {}", dir, dst.flat.numel(), n);
  if (dst.flat.dtype() == DType::F32) {
    reader.read(kParams, {0, n}, dst.flat.raw());
    return dir;
  }
  Tensor tmp = Tensor::zeros({n}, DType::F32);
  reader.read(kParams, {0, n}, tmp.raw());
  const float* src = tmp.data<float>();
  if (dst.flat.dtype() == DType::BF16)
    f32_to_bf16(src, dst.flat.data<uint16_t>(), static_cast<size_t>(n));
  else if (dst.flat.dtype() == DType::F16)
    f32_to_f16(src, dst.flat.data<uint16_t>(), static_cast<size_t>(n));
  else
    fail("init_from {}: cannot load into a {} parameter buffer", dir, dtype_name(dst.flat.dtype()));
  return dir;
}

std::string load_init_weights(const std::string& path, Model& model) {
  return load_init_weights(path, model, ElemSpan{0, model.spec().num_params()});
}

bool can_load_range(const std::string& path, const ModelSpec& spec) {
  return is_checkpoint_path(path) || is_model_file(path) ||
         (spec.family() == LlamaSpec::kFamily && is_hf_llama(path)) ||
         (spec.family() == GPTSpec::kFamily && gpt_file_reads_by_range(path));
}

std::string load_init_weights(const std::string& path, Model& model, ElemSpan range) {
  return load_init_weights(path, model.spec(), BufferWindow{model.param_buffer(), range, {}, -1});
}

std::string load_init_weights(const std::string& path, const ModelSpec& spec, const BufferWindow& window) {
  if (const Device dev = window.flat.device(); !dev.is_cpu()) {
    // Every loader writes through host pointers: read into host memory, then
    // copy the window's elements to the device in one transfer.
    BufferWindow host = window;
    host.flat = Tensor::zeros({window.flat.numel()}, DType::F32, MemCategory::Other);
    const std::string from = load_init_weights(path, spec, host);
    const ElemSpan r = window.range;
    runtime_for(dev).copy(window.flat.data<float>() + r.begin, dev, host.flat.data<float>() + r.begin,
                          Device::cpu(), sizeof(float) * static_cast<size_t>(r.end - r.begin),
                          default_stream(dev));
    return from;
  }
  const bool whole = window.is_whole();
  window.check_fits(spec.num_params(), "init_from " + path);
  const ElemSpan range = window.range;
  if (is_checkpoint_path(path)) {
    const std::string dir = resolve_step_dir(path);
    CheckpointReader reader = CheckpointReader::open(dir);
    reader.check_model(spec);
    const BufferEntry* b = reader.index().find_buffer(kParams);
    MT_CHECK(b && b->dtype == DType::F32, "checkpoint {}: no f32 '{}' buffer to start from", dir,
             kParams);
    MT_CHECK(window.flat.dtype() == DType::F32, "init_from {}: a checkpoint loads into an f32 "
             "buffer, not {}", dir, dtype_name(window.flat.dtype()));
    if (window.runs.empty()) {  // one contiguous read
      reader.read(kParams, {range.begin, range.end}, window.flat.data<float>() + range.begin);
      return dir;
    }
    for (const ParamInfo& p : spec.layout().params)  // a tp shard: each tensor's slices
      window.put(p, [&](const Tensor& dst) { reader.read(kParams, {p.begin, p.end()}, dst.raw()); });
    return dir;
  }
  if (is_model_file(path)) {
    const auto saved = read_model_file_spec(path);
    const std::string diff = model_description_difference(saved->to_json(), spec.to_json());
    MT_CHECK(diff.empty(), "init_from {} is another model: {}", path, diff);
    load_model_file(path, spec, window);
    return path;
  }
  if (spec.family() == LlamaSpec::kFamily) {
    MT_CHECK(is_hf_llama(path), "init_from {}: a llama model starts from a Hugging Face Llama "
             "checkpoint (a directory with config.json and model.safetensors), a model file "
             "meshtrain wrote, or a meshtrain checkpoint directory", path);
    load_hf_llama_weights(path, window, LlamaSpec::config_from_json(spec.to_json(), path));
    return path;
  }
  MT_CHECK(spec.family() == GPTSpec::kFamily, "init_from {}: model files are read for the gpt "
           "and llama families only; a {} model starts from a checkpoint directory", path,
           spec.family());
  const GPTConfig cfg = GPTSpec::config_from_json(spec.to_json(), "init_from");
  if (whole) return load_init_weights(path, GPTParams::view(cfg, window.flat), cfg);
  load_gpt_weights(path, window, cfg);
  return path;
}

}  // namespace meshtrain::ckpt
