// Integers from JSON that users wrote (configs, tokenizer.json, checkpoint
// indexes). nlohmann's get<int>() of a float such as 1e30 is undefined
// behaviour, and of 2^32 + 2 a silently wrong number, so a field is first
// checked to be a JSON integer within the range its reader can hold.
#pragma once
#include <cstdint>
#include <optional>

#include <nlohmann/json.hpp>

namespace meshtrain {

// `v` when it is a JSON integer in [lo, hi]; nullopt for anything else
// (a float, a string, an integer out of range).
inline std::optional<int64_t> json_integer_in(const nlohmann::json& v, int64_t lo, int64_t hi) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (hi < 0 || u > static_cast<uint64_t>(hi) || static_cast<int64_t>(u) < lo) return std::nullopt;
    return static_cast<int64_t>(u);
  }
  if (!v.is_number_integer()) return std::nullopt;
  const int64_t i = v.get<int64_t>();
  if (i < lo || i > hi) return std::nullopt;
  return i;
}

}  // namespace meshtrain
