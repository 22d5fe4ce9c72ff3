// SentencePiece-style BPE as a Hugging Face tokenizer.json spells it (Llama 2,
// Mistral, TinyLlama, ...): spaces become the meta symbol "▁" (U+2581) and one
// is put before the text, the BPE starts from one symbol per character, and a
// character the vocabulary lacks falls back to its UTF-8 bytes as the
// <0x00>..<0xFF> tokens. Decoding turns "▁" back into spaces, byte tokens
// into bytes, and drops the space the encoder put first.
//
// The file says this in one of two ways, both read here:
//   - "legacy": normalizer Sequence[Prepend("▁"), Replace(" ", "▁")], no
//     pre-tokenizer; the normalizer runs on every stretch of text between
//     added tokens, so each stretch gets its own "▁";
//   - a Metaspace pre-tokenizer (prepend_scheme always | first | never,
//     split true | false), "first" prepending only at the start of the text.
// Decoders: Sequence of Replace("▁", " "), ByteFallback, Fuse, Strip(" ", n, 0)
// (the order the library's converters write), or Metaspace.
#pragma once
#include <array>
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "meshtrain/data/bpe_model.h"

namespace meshtrain::data {

class SentencePieceStyle {
 public:
  // True when the file is SentencePiece-style (byte fallback, the "▁"
  // normalizer or a Metaspace pre-tokenizer).
  static bool detect(const nlohmann::json& tokenizer);
  // Reads the normalizer, pre-tokenizer, decoder and model flags; anything
  // outside the family above is refused naming the field. `vocab_text[id]` is
  // each token as the file spells it ("" for ids the model lacks).
  SentencePieceStyle(const nlohmann::json& tokenizer, const std::vector<std::string>& vocab_text,
                     const std::string& source);

  // Where a stretch of text (between added tokens) stands: at the start of
  // the text, after an added token, or continuing text encoded before (a
  // later chunk of a document), which gets no "▁" of its own.
  enum class Position { Start, Inside, Continues };
  // The pieces one stretch is encoded as; `scratch` holds their bytes.
  void pieces(std::string_view stretch, Position at, std::string& scratch,
              std::vector<std::string_view>& out) const;
  // Appends the ids of one piece: one symbol per character (byte fallback,
  // else unk), then the model's merges.
  void encode_piece(const BpeModel& model, std::string_view piece, int32_t unk_id,
                    std::vector<int32_t>& out) const;

  // Decoding as the library's decoder chain does. `text[id]` is the token as
  // spelled (added tokens included); ids with skip[id] set (skip may be null)
  // are left out first. `lossy`:
  // a run of byte tokens that is not valid UTF-8 becomes one U+FFFD per byte
  // token (the library's ByteFallback); otherwise the raw bytes are kept.
  std::string decode(std::span<const int32_t> ids, const std::vector<std::string>& text,
                     const uint8_t* skip, bool lossy) const;
  // The bytes token `id` adds after earlier tokens (streaming output): no
  // start-of-text trimming.
  std::string continuation_bytes(int32_t id, const std::vector<std::string>& text) const;

 private:
  enum class Prepend { Never, First, Always };
  bool norm_prepend_ = false;       // normalizer Prepend("▁"), per stretch
  bool norm_replace_ = false;       // normalizer Replace(" ", "▁")
  bool metaspace_ = false;          // the Metaspace pre-tokenizer
  Prepend prepend_ = Prepend::Never;
  bool split_ = false;              // Metaspace(split): a piece starts at every "▁"
  // Decoder
  bool decode_meta_ = false;        // "▁" -> " "
  bool decode_bytes_ = false;       // <0xXX> -> the byte
  bool metaspace_decoder_ = false;  // the first token's "▁" are dropped
  int strip_start_ = 0;             // leading spaces Strip removes
  bool fuse_unk_ = false;
  std::array<int32_t, 256> byte_token_{};  // <0xXX> ids, -1 when absent
};

}  // namespace meshtrain::data
