// Fuzz target: a GPT model file in any of the formats users bring (our
// safetensors, Hugging Face GPT-2 safetensors, llm.c's gpt2_124M.bin),
// recognized, its config read, and its weights loaded as `train --set
// model.init=FILE` does.
#include <cstdint>
#include <string>

#include "fuzz_input.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/tensor.h"
#include "meshtrain/io/gpt_model_file.h"

using namespace meshtrain;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::write_input(data, size, "gpt2_124M.bin");
  try {
    const ModelFileFormat format = detect_model_file_format(path);
    (void)model_file_format_name(format);
    // Hugging Face files do not record the head count; users pass it (--n-head).
    const GPTConfig cfg = read_gpt_config(path, format == ModelFileFormat::HuggingFace ? 2 : 0);
    if (cfg.num_params() <= fuzz::kMaxHarnessElements) {
      const Tensor flat = Tensor::zeros({cfg.num_params()});
      load_gpt_weights(path, GPTParams::view(cfg, flat), cfg);
      fuzz::note_accepted();
    }
  } catch (const Error& e) {
    fuzz::refused(e);
  }
  return 0;
}
