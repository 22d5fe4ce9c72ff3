// MESHTRAIN_TEST_SEED (default 1): moves the seeds of the equivalence tests'
// weights and data, so a tolerance can be checked over several draws
// (scripts/sweep-test-seeds.sh). dp_harness.h passes it to `train` as
// train.seed; the in-process tests offset their own seeds by it.
#pragma once
#include <cstdint>
#include <cstdlib>

inline uint64_t test_seed() {
  const char* s = std::getenv("MESHTRAIN_TEST_SEED");
  return s && *s ? std::strtoull(s, nullptr, 10) : 1;
}
