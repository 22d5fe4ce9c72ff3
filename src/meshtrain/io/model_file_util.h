// Helpers shared by the GPT model-file formats (internal to mt_io).
#pragma once
#include <map>
#include <string>

#include "meshtrain/core/tensor.h"
#include "meshtrain/io/safetensors.h"
#include "meshtrain/nn/gpt_config.h"

namespace meshtrain::io_detail {

// "model file X: NAME has shape (..) but the config needs (..)" unless equal.
void check_shape(const std::string& path, const std::string& name, const Shape& found,
                 const Shape& expected);

// The tensor `name` of `f`, converted to f32 (F32/BF16/F16 sources).
Tensor read_f32(const SafetensorsFile& f, const std::string& name);

// Reads a float weight straight into dst (same shape), converting the dtype.
void read_weight_into(const SafetensorsFile& f, const std::string& name, const Tensor& dst);

// (rows, cols) f32 -> new (cols, rows) f32.
Tensor transpose2d(const Tensor& src);

// Copies the first cfg.vocab_size rows of src (any rows >= V, C columns) into
// dst (padded_vocab, C) and zeros dst's padding rows.
void copy_vocab_rows(const Tensor& src, const Tensor& dst, int vocab_size);

// dst's values as f32 (dst itself when already f32).
Tensor as_f32(const Tensor& t);

// GPTConfig <-> string metadata (n_layer, n_head, n_embd, seq_len,
// vocab_size, padded_vocab).
std::map<std::string, std::string> config_metadata(const GPTConfig& cfg);
// Integer metadata value, or -1 when absent; throws naming the file when not an integer.
int metadata_int(const std::string& path, const std::map<std::string, std::string>& meta,
                 const std::string& key);

// Checks a config read from a file against the one the caller wants, naming
// the first field that differs.
void check_same_config(const std::string& path, const GPTConfig& file_cfg, const GPTConfig& want,
                       bool check_padded_vocab);

}  // namespace meshtrain::io_detail
