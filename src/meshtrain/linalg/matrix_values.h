// Test and benchmark matrices defined by their global indices, so every rank
// (and the ScaLAPACK peer, bench/peers/pdgemm_peer.cpp) generates the same
// matrix in any layout without moving it: uniform in [-1, 1).
#pragma once
#include <cstdint>

namespace meshtrain::linalg {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Element (i, j) of the stored matrix number `seed`.
inline double matrix_value(uint64_t seed, int64_t i, int64_t j) {
  const uint64_t h = splitmix64(seed * 0x100000001B3ull ^
                                (static_cast<uint64_t>(i) << 32 ^ static_cast<uint64_t>(j)));
  return static_cast<double>(h >> 11) * 0x1.0p-53 * 2.0 - 1.0;
}

}  // namespace meshtrain::linalg
