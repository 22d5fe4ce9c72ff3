// The tokenizer seam: text <-> token ids. Two kinds implement it:
//   - the byte-level tokenizer (id = byte, vocabulary 256), meshtrain's own;
//   - BpeTokenizer, read from a Hugging Face tokenizer.json (bpe_tokenizer.h).
// `load_tokenizer` picks one from a path, so `data prepare`, `tokenize` and
// generation all take `--tokenizer bytes|FILE|DIR` the same way.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace meshtrain::data {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // One past the largest id (the model's vocabulary must be at least this).
  virtual int vocab_size() const = 0;
  // "byte-level (256 tokens)" or "byte-level BPE, 128256 tokens, from PATH".
  virtual std::string describe() const = 0;

  // Appends the ids of `text` as it reads inside a document: nothing is added
  // around it, and special tokens written in the text ("<|endoftext|>") are
  // recognized as themselves, as the Hugging Face library does. Thread-safe.
  virtual void encode_into(std::string_view text, std::vector<int32_t>& out) const = 0;
  // As encode_into, for text that continues text encoded before (a later
  // chunk of a document in `data prepare`): SentencePiece-style tokenizers
  // put no "▁" before it, so encode(a) + continuation(b) reads as encode(a+b)
  // when b starts at a token boundary (a space, or a line for Llama 2, whose
  // newline is a byte token).
  virtual void encode_continuation_into(std::string_view text, std::vector<int32_t>& out) const {
    encode_into(text, out);
  }
  // The ids the tokenizer's post-processor puts around one sequence when
  // special tokens are wanted (Llama 3: <|begin_of_text|> before it).
  virtual std::vector<int32_t> prefix_tokens() const { return {}; }
  virtual std::vector<int32_t> suffix_tokens() const { return {}; }

  // The bytes the ids stand for, concatenated (not necessarily valid UTF-8: a
  // token may hold part of a character). Throws meshtrain::Error for an id
  // outside the vocabulary, naming its position.
  virtual std::string decode_bytes(std::span<const int32_t> ids,
                                   bool skip_special = false) const = 0;
  // The id of a token given as its text ("<|eot_id|>", "hello"), if it is one.
  virtual std::optional<int32_t> token_id(std::string_view token) const = 0;
  virtual bool is_special(int32_t /*id*/) const { return false; }

  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = false) const;
  // As UTF-8 text, as the Hugging Face library decodes: by default
  // decode_bytes with each invalid subpart replaced by U+FFFD.
  virtual std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;
  // The bytes token `id` adds after earlier tokens, for streaming output
  // (SentencePiece-style decoders drop a space only at the start of the text).
  // Special tokens add nothing.
  virtual std::string continuation_bytes(int32_t id) const {
    return decode_bytes(std::span<const int32_t>(&id, 1), true);
  }
};

// "bytes" (or "byte") gives the byte-level tokenizer; a file is read as a
// Hugging Face tokenizer.json; a folder must hold a tokenizer.json. Throws
// meshtrain::Error saying what is missing or unsupported, and where.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& spec);

}  // namespace meshtrain::data
