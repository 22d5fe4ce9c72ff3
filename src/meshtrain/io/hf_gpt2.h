// Hugging Face GPT-2 safetensors (see gpt_model_file.h for the public entry points).
#pragma once
#include "meshtrain/io/buffer_window.h"
#include "meshtrain/io/safetensors.h"
#include "meshtrain/nn/gpt_config.h"
#include "meshtrain/nn/gpt_params.h"

namespace meshtrain {

// Config inferred from tensor shapes (see read_gpt_config for n_head).
GPTConfig hf_gpt2_config(const SafetensorsFile& f, int n_head_hint);
void load_hf_gpt2(const SafetensorsFile& f, const BufferWindow& window, const GPTConfig& cfg);

}  // namespace meshtrain
