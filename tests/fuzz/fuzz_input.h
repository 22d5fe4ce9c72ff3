// Shared by the fuzz targets: the parsers under test read files, so each input
// is written to a scratch file first (on /dev/shm when it exists: no disk
// traffic per input). A target catches meshtrain::Error only: that is the one
// way a malformed file may be refused (it names the file and the problem).
// Anything else - another exception type, a crash, a sanitizer report, an
// allocation the input asked for without bound - is a finding.
#pragma once
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <string>

namespace meshtrain::fuzz {

// A per-process scratch folder (a fuzzer may run several processes at once),
// removed with its files when the process exits normally (the replay after
// every ctest; a crash leaves it, beside the finding).
inline const std::string& scratch_root() {
  struct Root {
    std::string dir;
    Root() {
      std::error_code ec;
      const char* base = std::filesystem::is_directory("/dev/shm", ec) ? "/dev/shm" : "/tmp";
      dir = std::string(base) + "/meshtrain_fuzz_" + std::to_string(::getpid());
      std::filesystem::create_directories(dir);
    }
    ~Root() {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  };
  static const Root root;
  return root.dir;
}

// A folder under the scratch root, for targets that need a directory of files.
inline std::string scratch_dir(const std::string& name) {
  const std::string dir = scratch_root() + "/" + name;
  std::filesystem::create_directories(dir);
  return dir;
}

// Writes `size` bytes to `path`; aborts (a harness fault, not a finding) on failure.
inline void write_bytes(const std::string& path, const uint8_t* data, size_t size) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) std::abort();
  if (size && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
}

// Writes the input to a scratch file named `name` (the loaders recognize
// formats by content, but users' files carry suffixes) and returns its path.
inline std::string write_input(const uint8_t* data, size_t size, const std::string& name) {
  const std::string path = scratch_root() + "/" + name;
  write_bytes(path, data, size);
  return path;
}

// Counts inputs a target read through to the end without an Error, so the
// replay can insist that seeds are accepted (a harness that refuses every
// input would test nothing).
inline int& accepted_inputs() {
  static int n = 0;
  return n;
}
inline void note_accepted() { ++accepted_inputs(); }

// The replay prints each refusal's message (what a user would read); the
// fuzzer, which refuses millions of inputs, does not.
inline bool& print_refusals() {
  static bool on = false;
  return on;
}
inline void refused(const std::exception& e) {
  if (print_refusals()) std::fprintf(stderr, "  refused: %s\n", e.what());
}

// Loads larger than this are not attempted by a harness: an input may declare
// any size, and reading what it declares is the product's job only up to
// what it checks first (header against file size).
constexpr int64_t kMaxHarnessElements = int64_t{1} << 22;

}  // namespace meshtrain::fuzz
