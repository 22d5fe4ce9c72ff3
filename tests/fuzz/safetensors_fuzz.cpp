// Fuzz target: a safetensors file as users bring it (Hugging Face, ours),
// opened, listed and read tensor by tensor with dtype conversion, then loaded
// as a model the way `train --set model.init=FILE`, `sample` and `export` do.
#include <cstdint>
#include <string>

#include "fuzz_input.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/tensor.h"
#include "meshtrain/io/model_file.h"
#include "meshtrain/io/safetensors.h"
#include "meshtrain/nn/model.h"

using namespace meshtrain;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::write_input(data, size, "model.safetensors");
  try {
    const SafetensorsFile f = SafetensorsFile::open(path);
    for (const auto& [key, value] : f.metadata()) (void)key.size(), (void)value.size();
    for (const std::string& name : f.names()) {
      const SafetensorsInfo& info = f.info(name);
      if (!info.supported || info.numel() > fuzz::kMaxHarnessElements) continue;
      const Tensor t = f.read(name);
      if (info.dtype == DType::F32 || info.dtype == DType::BF16 || info.dtype == DType::F16) {
        Tensor as_f32 = Tensor::zeros(info.shape);
        f.read_into(name, as_f32);  // with conversion from the 16-bit types
      }
      if (info.numel() > 0) {
        uint8_t first[16];
        f.read_range(name, 0, 1, first);
      }
    }
    fuzz::note_accepted();
  } catch (const Error& e) {
    fuzz::refused(e);
  }
  try {
    if (is_model_file(path)) {
      const auto spec = read_model_file_spec(path);
      if (spec->num_params() <= fuzz::kMaxHarnessElements) {
        const Tensor params = Tensor::zeros({spec->num_params()});
        load_model_file(path, *spec, params);
      }
    }
  } catch (const Error& e) {
    fuzz::refused(e);
  }
  return 0;
}
