// Small readers shared by the tokenizer.json parsers (bpe_tokenizer,
// sentencepiece_style).
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "meshtrain/core/error.h"

namespace meshtrain::data {

// The "type" of a tokenizer.json component (normalizer, pre-tokenizer,
// decoder, ...), or "?" when it has none.
inline std::string json_type_of(const nlohmann::json& j) {
  return j.is_object() && j.contains("type") && j["type"].is_string() ? j["type"].get<std::string>()
                                                                      : std::string("?");
}

// An integer field (a token id, an offset) as int32. A float or a string is
// refused by name: nlohmann's get<int>() of 1e30 is undefined behaviour, and
// of "7" a type error that names neither the file nor the field.
inline int32_t json_int32(const nlohmann::json& v, const std::string& source, std::string_view what) {
  MT_CHECK(v.is_number_integer() && v.get<int64_t>() >= INT32_MIN && v.get<int64_t>() <= INT32_MAX,
           "tokenizer '{}': {} is {}, not a 32-bit integer", source, what, v.dump());
  return static_cast<int32_t>(v.get<int64_t>());
}

// json_int32 of an optional field, `fallback` when it is absent.
inline int32_t json_int32_or(const nlohmann::json& obj, const char* key, int32_t fallback,
                             const std::string& source, std::string_view what) {
  return obj.is_object() && obj.contains(key) ? json_int32(obj[key], source, what) : fallback;
}

}  // namespace meshtrain::data
