// GPT model files: save our own safetensors format, and read a config or load
// weights from any of the three formats users bring:
//   meshtrain   safetensors with our names and (out, in) matrices, padded wte,
//               config in __metadata__ ("format": "meshtrain-gpt")
//   huggingface GPT-2 model.safetensors: same names (optionally prefixed
//               "transformer."), Conv1D matrices stored (in, out), wte with the
//               real vocabulary's rows only, config inferred from shapes
//   llmc        llm.c gpt2_124M.bin: 256-int32 header (magic 20240326, version
//               3 = f32, 5 = bf16), then tensors in llm.c's tensor-major order
// Every problem is reported as a meshtrain::Error naming the file and tensor.
#pragma once
#include <string>
#include <string_view>

#include "meshtrain/io/buffer_window.h"
#include "meshtrain/nn/gpt.h"
#include "meshtrain/nn/gpt_config.h"
#include "meshtrain/nn/gpt_params.h"

namespace meshtrain {

enum class ModelFileFormat { Meshtrain, HuggingFace, LlmC };
std::string_view model_file_format_name(ModelFileFormat f);

// Looks at the file's first bytes (and safetensors metadata) to tell the format.
ModelFileFormat detect_model_file_format(const std::string& path);

// The config of the model stored in `path`. Hugging Face files do not record
// the number of heads: it comes from the file's metadata if present, else from
// n_head_hint (> 0), else from the GPT-2 sizes (768 -> 12, 1024 -> 16,
// 1280 -> 20, 1600 -> 25); otherwise an Error asks for model.n_head. A hint
// that contradicts a head count the file records is an Error.
GPTConfig read_gpt_config(const std::string& path, int n_head_hint = 0);

// Fills `dst` (views into a flat buffer of any float dtype, laid out for cfg)
// from a model file of any format. Every tensor's shape is checked against
// cfg; missing or unexpected tensors are errors (Hugging Face causal-mask
// buffers and a tied lm_head.weight are ignored). Padded vocabulary rows of
// wte are zeroed.
void load_gpt_weights(const std::string& path, const GPTParams& dst, const GPTConfig& cfg);
// Only the window of an f32 flat buffer laid out for cfg (a range, a tp
// shard's slices): safetensors files, ours or Hugging Face GPT-2
// (gpt_file_reads_by_range); llm.c files load whole (a window of all of the
// buffer works for every format).
void load_gpt_weights(const std::string& path, const BufferWindow& window, const GPTConfig& cfg);
bool gpt_file_reads_by_range(const std::string& path);

// Our own format: f32, our names, config in the metadata. Written atomically.
void save_gpt_safetensors(const std::string& path, const GPTParams& params, const GPTConfig& cfg);
inline void save_gpt_safetensors(const std::string& path, const GPT& model) {
  save_gpt_safetensors(path, model.params(), model.config());
}

// Hugging Face GPT-2 layout (names as in the `gpt2` repository's
// model.safetensors, Conv1D weights (in, out), wte with vocab_size rows,
// metadata "format": "pt" plus n_head), loadable by transformers'
// GPT2LMHeadModel given a matching config.json.
void export_hf_gpt2(const std::string& path, const GPTParams& params, const GPTConfig& cfg);

// llm.c model file, version 3 (f32).
void write_llmc_model(const std::string& path, const GPTParams& params, const GPTConfig& cfg);

}  // namespace meshtrain
