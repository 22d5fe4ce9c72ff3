// Fuzz target: a training config file (JSON with comments), loaded and
// validated as `meshtrain train --config FILE` does.
#include <cstdint>
#include <string>

#include "fuzz_input.h"
#include "meshtrain/config/config_loader.h"
#include "meshtrain/core/error.h"

using namespace meshtrain;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::write_input(data, size, "config.json");
  try {
    (void)load_config(path);
    fuzz::note_accepted();
  } catch (const Error& e) {
    fuzz::refused(e);
  }
  return 0;
}
