// Checkpoints <-> single model files: export the parameters of a checkpoint
// as one consolidated safetensors file (meshtrain naming, or Hugging Face
// GPT-2 naming for transformers), and import a model file of any supported
// format (meshtrain, Hugging Face, llm.c) as a step-0 checkpoint to train from.
#pragma once
#include <string>

#include "meshtrain/ckpt/checkpoint_reader.h"

namespace meshtrain::ckpt {

enum class ExportFormat { HuggingFace, Meshtrain };
// "hf" | "meshtrain"; throws on anything else.
ExportFormat parse_export_format(const std::string& name);

// Reads the whole parameter buffer of `step_dir` (verified) and writes it.
void export_checkpoint(const std::string& step_dir, const std::string& out_path, ExportFormat format,
                       bool verify = true);

// Writes <root>/step_00000000 (params only, world 1; optimizer state starts
// at zero on resume) and <root>/latest. Returns the step directory.
std::string import_model_file(const std::string& model_path, const std::string& root,
                              int n_head_hint = 0);

}  // namespace meshtrain::ckpt
