// A trained model as one file, for any family: safetensors with the layout's
// tensor names (nn/model.h), f32, and the model description in the
// metadata. GPT writes its established format (io/gpt_model_file.h:
// "meshtrain-gpt", readable by init_from, sample and the exporters); other
// families write "meshtrain-model" with the description under "model".
#pragma once
#include <string>

#include "meshtrain/io/buffer_window.h"
#include "meshtrain/nn/model.h"

namespace meshtrain {

// Written atomically. The model's parameters must be whole on this rank.
void save_model_safetensors(const std::string& path, const Model& model);

// Reading the "meshtrain-model" form back (init_from, ckpt import):
// whether `path` is one, the model it describes, and its weights into a flat
// f32 buffer laid out for that spec (every tensor by name and shape; a
// missing, extra or misshapen tensor is an Error naming it).
bool is_model_file(const std::string& path);
std::shared_ptr<const ModelSpec> read_model_file_spec(const std::string& path);
void load_model_file(const std::string& path, const ModelSpec& spec, const Tensor& params);
// Only the window's range of that buffer (every tensor still checked).
void load_model_file(const std::string& path, const ModelSpec& spec, const BufferWindow& window);
// The same from a spec and its flat f32 parameter buffer.
void save_model_safetensors(const std::string& path, const ModelSpec& spec, const Tensor& params);

}  // namespace meshtrain
