// Fuzz target: an llm.c token shard (uint16 / uint32 tokens) or a masked
// instruction shard, as `train` maps it: header checks, then every token and
// mask byte read back in windows.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_input.h"
#include "meshtrain/core/error.h"
#include "meshtrain/data/token_shard.h"

using namespace meshtrain;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::write_input(data, size, "train_000000.bin");
  try {
    const data::TokenShard shard(path);
    const int64_t n = std::min<int64_t>(shard.num_tokens(), fuzz::kMaxHarnessElements);
    std::vector<int32_t> tokens(64);
    std::vector<uint8_t> mask(64);
    for (int64_t start = 0; start < n; start += 64) {
      const int64_t count = std::min<int64_t>(64, n - start);
      shard.read(start, count, tokens.data());
      if (shard.masked()) shard.read_mask(start, count, mask.data());
    }
    if (n > 0) (void)shard.token(n - 1);
    fuzz::note_accepted();
  } catch (const Error& e) {
    fuzz::refused(e);
  }
  return 0;
}
