// llm.c model files (see gpt_model_file.h for the public entry points).
#pragma once
#include <string>

#include "meshtrain/nn/gpt_config.h"
#include "meshtrain/nn/gpt_params.h"

namespace meshtrain {

constexpr int kLlmcModelMagic = 20240326;

// True when the file starts with the llm.c model magic.
bool is_llmc_model(const std::string& path);
GPTConfig read_llmc_config(const std::string& path);
void load_llmc_model(const std::string& path, const GPTParams& dst, const GPTConfig& cfg);

}  // namespace meshtrain
