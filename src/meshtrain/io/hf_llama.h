// Hugging Face LlamaForCausalLM checkpoints: read one (a model directory with
// config.json and model.safetensors, or model.safetensors.index.json and its
// shards; or a .safetensors file with config.json beside it) into a Llama
// model, and write one that transformers loads (config.json plus
// model.safetensors, f32). Tensor names are the same on both sides
// (nn/llama_spec.h); the embedding and lm_head hold the real vocabulary's
// rows there and Vp (padded) rows here. Every problem is an Error naming the
// file and the tensor or field.
#pragma once
#include <string>

#include "meshtrain/nn/llama_config.h"
#include "meshtrain/io/buffer_window.h"
#include "meshtrain/nn/model.h"

namespace meshtrain {

// True when `path` looks like a Hugging Face Llama checkpoint (its
// config.json says model_type "llama" or a Llama architecture).
bool is_hf_llama(const std::string& path);

// The shape from config.json. Tied word embeddings (Llama 3.2 1B/3B) are an
// Error for now (this family's head is untied).
LlamaConfig read_hf_llama_config(const std::string& path);

// Fills `params`, a flat f32 buffer laid out for cfg (nn/llama_spec.h), from
// `path` (any of F32/BF16/F16 in the files).
void load_hf_llama_weights(const std::string& path, const Tensor& params, const LlamaConfig& cfg);
// Only the window's range of that buffer (every tensor still checked).
void load_hf_llama_weights(const std::string& path, const BufferWindow& window, const LlamaConfig& cfg);

// Writes <dir>/config.json and <dir>/model.safetensors from a flat f32
// parameter buffer laid out for cfg.
void export_hf_llama(const std::string& dir, const Tensor& params, const LlamaConfig& cfg);

}  // namespace meshtrain
