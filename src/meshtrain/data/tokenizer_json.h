// Small readers shared by the tokenizer.json parsers (bpe_tokenizer,
// sentencepiece_style).
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "meshtrain/core/error.h"
#include "meshtrain/core/json_integer.h"

namespace meshtrain::data {

// The "type" of a tokenizer.json component (normalizer, pre-tokenizer,
// decoder, ...), or "?" when it has none.
inline std::string json_type_of(const nlohmann::json& j) {
  return j.is_object() && j.contains("type") && j["type"].is_string() ? j["type"].get<std::string>()
                                                                      : std::string("?");
}

// An integer field (a token id, an offset) as int32; anything else is
// refused naming the file and the field (core/json_integer.h).
inline int32_t json_int32(const nlohmann::json& v, const std::string& source, std::string_view what) {
  const auto i = json_integer_in(v, INT32_MIN, INT32_MAX);
  MT_CHECK(i, "tokenizer '{}': {} is {}, not a 32-bit integer", source, what, v.dump());
  return static_cast<int32_t>(*i);
}

// json_int32 of an optional field, `fallback` when it is absent.
inline int32_t json_int32_or(const nlohmann::json& obj, const char* key, int32_t fallback,
                             const std::string& source, std::string_view what) {
  return obj.is_object() && obj.contains(key) ? json_int32(obj[key], source, what) : fallback;
}

}  // namespace meshtrain::data
