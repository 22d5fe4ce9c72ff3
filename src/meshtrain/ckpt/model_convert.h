// Checkpoints <-> single model files: export the parameters of a checkpoint
// as one consolidated safetensors file (meshtrain naming, or Hugging Face
// GPT-2 naming for transformers), and import a model file of any supported
// format (meshtrain, Hugging Face, llm.c) as a step-0 checkpoint to train from;
// and `init_from` in either form: a model file or a checkpoint directory.
#pragma once
#include <string>

#include "meshtrain/ckpt/checkpoint_reader.h"
#include "meshtrain/nn/gpt_params.h"
#include "meshtrain/io/buffer_window.h"
#include "meshtrain/nn/model.h"

namespace meshtrain::ckpt {

enum class ExportFormat { HuggingFace, Meshtrain };
// "hf" | "meshtrain"; throws on anything else.
ExportFormat parse_export_format(const std::string& name);

// Reads the whole parameter buffer of `step_dir` (verified) and writes it.
// A LoRA checkpoint is written as its base with the adapters merged in; the
// base is read from where the run read it, or from `lora_base`.
void export_checkpoint(const std::string& step_dir, const std::string& out_path, ExportFormat format,
                       bool verify = true, const std::string& lora_base = "");

// Writes <root>/step_00000000 (params only, world 1; optimizer state starts
// at zero on resume) and <root>/latest. Returns the step directory.
std::string import_model_file(const std::string& model_path, const std::string& root,
                              int n_head_hint = 0);

// init_from: a model file (io/gpt_model_file.h), a checkpoint step directory,
// or a checkpoint root (its newest complete checkpoint). Checkpoints give
// their parameters only; the optimizer starts fresh.
bool is_checkpoint_path(const std::string& path);
// The model config of `path` (a checkpoint's from its index).
GPTConfig read_init_config(const std::string& path, int n_head_hint = 0);
// Fills dst (an f32, bf16 or f16 flat buffer laid out for cfg) from `path`;
// a checkpoint of another model is an Error naming its index. Returns the
// file or step directory the weights came from.
std::string load_init_weights(const std::string& path, const GPTParams& dst, const GPTConfig& cfg);
// The same for any model whose family has a file format here (GPT: meshtrain,
// Hugging Face GPT-2, llm.c); a checkpoint directory works for every family.
std::string load_init_weights(const std::string& path, Model& model);
// Only elements [range) of the model's buffer (ZeRO's own range; the rest is
// never written), for the files can_load_range accepts.
std::string load_init_weights(const std::string& path, Model& model, ElemSpan range);
// Into a window of a buffer (io/buffer_window.h): a range, and/or a
// tensor-parallel shard's slices of each tensor; `spec` is the logical
// (whole) model. A window that is not the whole buffer needs can_load_range.
std::string load_init_weights(const std::string& path, const ModelSpec& spec, const BufferWindow& window);
// Whether `path` can be read by range for `spec`: a checkpoint directory, a
// model file meshtrain wrote (any family, GPT's own format included), a
// Hugging Face GPT-2 file or Llama directory. llm.c files load whole.
bool can_load_range(const std::string& path, const ModelSpec& spec);

}  // namespace meshtrain::ckpt
