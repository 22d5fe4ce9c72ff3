// A byte-level BPE tokenizer read from a Hugging Face tokenizer.json, the
// format published checkpoints ship (GPT-2, Llama 3, Qwen without its NFC
// normalizer, ...). Encoding runs the library's pipeline:
//   1. added tokens ("<|endoftext|>") are cut out of the text first, leftmost-
//      longest, honouring lstrip/rstrip;
//   2. the pre-tokenizer (Split with a regex, ByteLevel with or without GPT-2's
//      regex and prefix space, or a Sequence of these) cuts the rest into pieces;
//   3. the BPE model merges each piece's bytes (bpe_model.h), optionally
//      keeping a piece that is itself a token whole (ignore_merges).
// Decoding concatenates each token's bytes. SentencePiece-style BPE with byte
// fallback (Llama 2, Mistral) runs the same steps with its own normalization,
// symbols and decoder (sentencepiece_style.h). Anything outside these two
// families (other normalizers, WordPiece/Unigram models) is refused at load
// with an error naming it.
#pragma once
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "meshtrain/data/bpe_model.h"
#include "meshtrain/data/piece_cache.h"
#include "meshtrain/data/regex_splitter.h"
#include "meshtrain/data/sentencepiece_style.h"
#include "meshtrain/data/shared_piece_cache.h"
#include "meshtrain/data/tokenizer.h"

namespace meshtrain::data {

class BpeTokenizer final : public Tokenizer {
 public:
  // Reads and validates `path`; errors name the file and the JSON field.
  static std::unique_ptr<BpeTokenizer> from_file(const std::string& path);
  // `json_text` is the file's content; `source` names it in messages.
  BpeTokenizer(const std::string& json_text, std::string source);
  ~BpeTokenizer() override;

  int vocab_size() const override { return static_cast<int>(token_bytes_.size()); }
  std::string describe() const override;
  void encode_into(std::string_view text, std::vector<int32_t>& out) const override;
  void encode_continuation_into(std::string_view text, std::vector<int32_t>& out) const override;
  std::vector<int32_t> prefix_tokens() const override { return prefix_; }
  std::vector<int32_t> suffix_tokens() const override { return suffix_; }
  std::string decode_bytes(std::span<const int32_t> ids, bool skip_special) const override;
  std::string decode(std::span<const int32_t> ids, bool skip_special) const override;
  std::string continuation_bytes(int32_t id) const override;
  std::optional<int32_t> token_id(std::string_view token) const override;
  bool is_special(int32_t id) const override;

 private:
  struct AddedToken {
    std::string content;
    int32_t id = 0;
    bool special = false, lstrip = false, rstrip = false;
  };
  struct PreStep {
    std::unique_ptr<RegexSplitter> split;  // null: no split at this step
    bool prefix_space = false;             // ByteLevel(add_prefix_space)
  };

  void load(const std::string& json_text);
  void encode_text(std::string_view text, bool continues, std::vector<int32_t>& out) const;
  // One stretch of text between added tokens.
  void encode_stretch(std::string_view text, SentencePieceStyle::Position at,
                      std::vector<int32_t>& out) const;
  void encode_segment(std::string_view text, size_t step, std::vector<int32_t>& out) const;
  void encode_piece_cached(std::string_view piece, std::vector<int32_t>& out) const;
  // Final pieces, looked up in this thread's cache with their slots fetched ahead.
  void encode_pieces(std::span<const std::string_view> pieces, std::vector<int32_t>& out) const;
  void encode_keyed(const PieceKey& key, PieceCache& cache, std::vector<int32_t>& out) const;
  PieceCache& thread_cache() const;
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;
  void check_ids(std::span<const int32_t> ids) const;

  std::string source_;
  std::unique_ptr<BpeModel> model_;
  std::unique_ptr<SentencePieceStyle> sp_;  // null: byte-level BPE
  std::vector<std::string> token_bytes_;  // by id: the bytes decoding gives
  std::vector<std::string> token_text_;   // by id: the token as tokenizer.json spells it
  std::vector<uint8_t> special_;          // by id
  std::vector<AddedToken> added_;         // longest first
  bool added_first_byte_[256] = {};
  std::vector<PreStep> steps_;
  std::vector<int32_t> prefix_, suffix_;
  uint64_t serial_ = 0;  // tells this tokenizer's entries in the per-thread piece cache
  // Behind the per-thread caches: pieces any thread already merged (made at
  // the first miss).
  mutable std::once_flag shared_once_;
  mutable std::unique_ptr<SharedPieceCache> shared_;
};

}  // namespace meshtrain::data
