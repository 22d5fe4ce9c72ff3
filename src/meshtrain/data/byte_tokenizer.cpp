#include "meshtrain/data/byte_tokenizer.h"

#include "meshtrain/core/error.h"

namespace meshtrain::data {

std::vector<uint16_t> ByteTokenizer::encode(std::string_view text) const {
  std::vector<uint16_t> out;
  encode_into(text, out);
  return out;
}

void ByteTokenizer::encode_into(std::string_view text, std::vector<uint16_t>& out) const {
  out.reserve(out.size() + text.size());
  for (char c : text) out.push_back(static_cast<uint8_t>(c));
}

template <typename T>
static std::string decode_tokens(std::span<const T> tokens) {
  std::string out;
  out.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int64_t t = tokens[i];
    MT_CHECK(t >= 0 && t < ByteTokenizer::kVocabSize,
             "token {} at position {} is outside the byte vocabulary [0, 256)", t, i);
    out.push_back(static_cast<char>(static_cast<uint8_t>(t)));
  }
  return out;
}

std::string ByteTokenizer::decode(std::span<const uint16_t> tokens) const {
  return decode_tokens(tokens);
}

std::string ByteTokenizer::decode(std::span<const int32_t> tokens) const {
  return decode_tokens(tokens);
}

std::string ByteTokenizer::token_repr(int token) const {
  MT_CHECK(token >= 0 && token < kVocabSize, "token {} is outside the byte vocabulary [0, 256)",
           token);
  switch (token) {
    case '\n': return "\\n";
    case '\t': return "\\t";
    case '\r': return "\\r";
    case '\\': return "\\\\";
    default: break;
  }
  if (token < 0x20 || token >= 0x7f) return fmt::format("\\x{:02x}", token);
  return std::string(1, static_cast<char>(token));
}

}  // namespace meshtrain::data
