// Small readers shared by the tokenizer.json parsers (bpe_tokenizer,
// sentencepiece_style).
#pragma once
#include <nlohmann/json.hpp>
#include <string>

namespace meshtrain::data {

// The "type" of a tokenizer.json component (normalizer, pre-tokenizer,
// decoder, ...), or "?" when it has none.
inline std::string json_type_of(const nlohmann::json& j) {
  return j.is_object() && j.contains("type") && j["type"].is_string() ? j["type"].get<std::string>()
                                                                      : std::string("?");
}

}  // namespace meshtrain::data
