// Fuzz target: a Hugging Face Llama checkpoint's config.json, beside a small
// valid model.safetensors, read as `train --set model.init=DIR` reads it.
#include <cstdint>
#include <string>

#include "fuzz_input.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/tensor.h"
#include "meshtrain/io/hf_llama.h"

using namespace meshtrain;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string dir = fuzz::scratch_dir("hf_llama");
  fuzz::write_bytes(dir + "/config.json", data, size);
  try {
    if (!is_hf_llama(dir)) return 0;
    const LlamaConfig cfg = read_hf_llama_config(dir);
    (void)cfg;
    fuzz::note_accepted();
  } catch (const Error& e) {
    fuzz::refused(e);
  }
  return 0;
}
