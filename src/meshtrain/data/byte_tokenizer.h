// The byte-level tokenizer: one token per byte, token id = byte value, so any
// text (any bytes at all) round-trips exactly and the vocabulary is 256.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace meshtrain::data {

class ByteTokenizer {
 public:
  static constexpr int kVocabSize = 256;
  int vocab_size() const { return kVocabSize; }

  std::vector<uint16_t> encode(std::string_view text) const;
  // Appends the tokens of `text` to `out` (no reallocation churn when streaming).
  void encode_into(std::string_view text, std::vector<uint16_t>& out) const;
  // Throws meshtrain::Error for a token outside [0, 256).
  std::string decode(std::span<const uint16_t> tokens) const;
  std::string decode(std::span<const int32_t> tokens) const;
  // One token as printable text ("a", "\n" -> "\\n", 0x07 -> "\\x07"), for logs.
  std::string token_repr(int token) const;
};

}  // namespace meshtrain::data
