// Fuzz target: a checkpoint step's index.json (what resume and `ckpt`
// commands read first), parsed and validated.
#include <cstdint>
#include <string>

#include "fuzz_input.h"
#include "meshtrain/ckpt/checkpoint_index.h"
#include "meshtrain/core/error.h"

using namespace meshtrain;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string dir = fuzz::scratch_dir("step_00000001");
  fuzz::write_bytes(dir + "/index.json", data, size);
  try {
    (void)ckpt::read_index(dir);
    fuzz::note_accepted();
  } catch (const Error& e) {
    fuzz::refused(e);
  }
  return 0;
}
