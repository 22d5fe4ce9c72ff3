// Replays saved inputs through a fuzz target without libFuzzer, so the normal
// build (GCC, no sanitizers) runs every seed and every past finding as a test:
//   <target>_fuzz FILE|DIR...
// Exit status 0 when every input was handled (accepted, or refused with a
// meshtrain::Error); a crash or an escaping exception fails the run. Seeds
// (files given by name, and files named seed_* in a folder) are valid files
// of the format: each must be accepted, not only survived.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

int replay_file(const std::filesystem::path& p, bool must_accept) {
  std::ifstream in(p, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", p.c_str());
    return 1;
  }
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::fprintf(stderr, "input %s (%zu bytes)\n", p.c_str(), bytes.size());
  const int before = meshtrain::fuzz::accepted_inputs();
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  if (must_accept && meshtrain::fuzz::accepted_inputs() == before) {
    std::fprintf(stderr, "seed %s was refused: the harness or the parser rejects a valid file\n",
                 p.c_str());
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  meshtrain::fuzz::print_refusals() = true;
  int inputs = 0;
  for (int i = 1; i < argc; ++i) {
    const std::filesystem::path arg(argv[i]);
    if (std::filesystem::is_directory(arg)) {
      std::vector<std::filesystem::path> files;
      for (const auto& e : std::filesystem::directory_iterator(arg))
        if (e.is_regular_file()) files.push_back(e.path());
      std::sort(files.begin(), files.end());
      for (const auto& f : files) {
        if (replay_file(f, f.filename().string().rfind("seed_", 0) == 0)) return 1;
        ++inputs;
      }
    } else {
      if (replay_file(arg, true)) return 1;
      ++inputs;
    }
  }
  if (inputs == 0) {
    std::fprintf(stderr, "no inputs given\n");
    return 1;
  }
  std::printf("replayed %d input(s)\n", inputs);
  return 0;
}
