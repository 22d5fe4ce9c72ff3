// Fuzz target: a cluster description file, as `meshtrain plan --cluster FILE`
// (and a calibrated one, as `train` and `bench train` predict with) reads it.
#include <cstdint>
#include <string>

#include "fuzz_input.h"
#include "meshtrain/core/error.h"
#include "meshtrain/plan/cluster.h"

using namespace meshtrain;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::write_input(data, size, "cluster.json");
  try {
    const plan::ClusterSpec spec = plan::ClusterSpec::load(path);
    (void)spec.to_json().dump();
    fuzz::note_accepted();
  } catch (const Error& e) {
    fuzz::refused(e);
  }
  return 0;
}
