#include "meshtrain/ckpt/model_convert.h"

#include "meshtrain/ckpt/checkpoint_writer.h"
#include "meshtrain/ckpt/gpt_checkpoint.h"
#include "meshtrain/core/error.h"
#include "meshtrain/io/gpt_model_file.h"

namespace meshtrain::ckpt {

ExportFormat parse_export_format(const std::string& name) {
  if (name == "hf" || name == "huggingface") return ExportFormat::HuggingFace;
  if (name == "meshtrain") return ExportFormat::Meshtrain;
  throw UsageError("unknown export format '" + name + "' (expected hf or meshtrain)");
}

void export_checkpoint(const std::string& step_dir, const std::string& out_path, ExportFormat format,
                       bool verify) {
  CheckpointReader reader = CheckpointReader::open(step_dir, {verify});
  const GPTConfig cfg = reader.index().model;
  cfg.validate();
  const BufferEntry* b = reader.index().find_buffer(kParams);
  MT_CHECK(b, "checkpoint {}: no '{}' buffer to export", step_dir, kParams);
  MT_CHECK(b->dtype == DType::F32 && b->numel == cfg.num_params(),
           "checkpoint {}: parameter buffer ({} elements of {}) does not fit the model ({} f32)", step_dir,
           b->numel, dtype_name(b->dtype), cfg.num_params());
  Tensor flat = Tensor::zeros({cfg.num_params()}, DType::F32);
  reader.read(kParams, {0, cfg.num_params()}, flat.raw());
  const GPTParams params = GPTParams::view(cfg, flat);
  if (format == ExportFormat::HuggingFace)
    export_hf_gpt2(out_path, params, cfg);
  else
    save_gpt_safetensors(out_path, params, cfg);
}

std::string import_model_file(const std::string& model_path, const std::string& root, int n_head_hint) {
  const GPTConfig cfg = read_gpt_config(model_path, n_head_hint);
  Tensor flat = Tensor::zeros({cfg.num_params()}, DType::F32);
  const GPTParams params = GPTParams::view(cfg, flat);
  load_gpt_weights(model_path, params, cfg);
  SaveRequest req = gpt_save_request(0, params, cfg, nullptr);
  req.config = {{"imported_from", model_path},
                {"format", std::string(model_file_format_name(detect_model_file_format(model_path)))}};
  WriterOptions opt;
  opt.root = root;
  opt.async = false;
  opt.keep_last = 0;
  CheckpointWriter writer(opt, nullptr);
  writer.save(req);
  return writer.stats().back().dir;
}

}  // namespace meshtrain::ckpt
