// Deterministic, seedable random numbers (xoshiro256** seeded by splitmix64).
// The state is four words, so checkpoints can save and restore it exactly.
#pragma once
#include <array>
#include <cmath>
#include <cstdint>

namespace meshtrain {

class Rng {
 public:
  explicit Rng(uint64_t seed = 1) { seed_(seed); }
  void seed_(uint64_t seed) {
    uint64_t x = seed;
    for (auto& s : state_) s = splitmix64(x);
    has_spare_ = false;
  }
  uint64_t next_u64() {
    const uint64_t result = rotl(state_[1] * 5, 7) * 9;
    const uint64_t t = state_[1] << 17;
    state_[2] ^= state_[0];
    state_[3] ^= state_[1];
    state_[1] ^= state_[2];
    state_[0] ^= state_[3];
    state_[2] ^= t;
    state_[3] = rotl(state_[3], 45);
    return result;
  }
  uint32_t next_u32() { return static_cast<uint32_t>(next_u64() >> 32); }
  // Uniform in [0, 1) with 24 random bits.
  float uniform() { return static_cast<float>(next_u64() >> 40) * (1.0f / 16777216.0f); }
  double uniform_double() { return static_cast<double>(next_u64() >> 11) * (1.0 / 9007199254740992.0); }
  // Uniform integer in [0, n), unbiased.
  uint64_t below(uint64_t n) {
    if (n <= 1) return 0;
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t r;
    do { r = next_u64(); } while (r >= limit);
    return r % n;
  }
  // Standard normal (Box-Muller, using both values).
  float normal() {
    if (has_spare_) { has_spare_ = false; return spare_; }
    double u1, u2;
    do { u1 = uniform_double(); } while (u1 <= 0.0);
    u2 = uniform_double();
    double r = std::sqrt(-2.0 * std::log(u1));
    spare_ = static_cast<float>(r * std::sin(2.0 * M_PI * u2));
    has_spare_ = true;
    return static_cast<float>(r * std::cos(2.0 * M_PI * u2));
  }

  std::array<uint64_t, 4> state() const { return state_; }
  void set_state(const std::array<uint64_t, 4>& s) { state_ = s; has_spare_ = false; }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  static uint64_t splitmix64(uint64_t& x) {
    uint64_t z = (x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  std::array<uint64_t, 4> state_{};
  bool has_spare_ = false;
  float spare_ = 0.f;
};

}  // namespace meshtrain
