// Seeded random token ids for tests that feed models.
#pragma once
#include <cstdint>
#include <vector>

#include "meshtrain/core/rng.h"

namespace meshtrain::testing {

// n ids in [0, vocab) from `seed`.
inline std::vector<int32_t> random_tokens(int n, int vocab, uint64_t seed) {
  Rng r(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = static_cast<int32_t>(r.below(static_cast<uint64_t>(vocab)));
  return t;
}

}  // namespace meshtrain::testing
