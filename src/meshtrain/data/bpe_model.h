// The BPE model of a byte-level tokenizer: a piece of text (bytes) becomes
// ids by starting from one id per byte and repeatedly merging the adjacent
// pair whose merge has the lowest rank (leftmost first among equals), as the
// Hugging Face library and tiktoken do.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace meshtrain::data {

class BpeModel {
 public:
  // `vocab[id]` is the bytes of token `id` ("" for ids the model lacks);
  // merges are (left id, right id) by rank. Throws meshtrain::Error for a
  // merge whose result is not in the vocabulary.
  struct Merge {
    int32_t left, right;
  };
  BpeModel(std::vector<std::string> vocab, std::vector<Merge> merges, bool ignore_merges,
           int32_t unk_id);

  // Appends the ids of one pre-tokenized piece.
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;
  // Applies the merges to symbols made elsewhere (SentencePiece-style BPE
  // starts from characters, not bytes).
  void merge(std::vector<int32_t>& syms) const;
  bool ignore_merges() const { return ignore_merges_; }
  int32_t unk_id() const { return unk_id_; }

  int32_t size() const { return static_cast<int32_t>(vocab_.size()); }
  const std::string& bytes_of(int32_t id) const { return vocab_[static_cast<size_t>(id)]; }
  int32_t id_of(std::string_view bytes) const;  // -1 when not a token

 private:
  struct Slot {
    uint64_t key = 0;  // 0 = empty; else (left+1) << 32 | (right+1)
    int32_t rank = 0;
    int32_t merged = 0;
  };
  const Slot* find_pair(int32_t left, int32_t right) const;
  void merge_short(std::vector<int32_t>& syms) const;
  void merge_long(std::vector<int32_t>& syms) const;

  std::vector<std::string> vocab_;
  // Transparent hashing: lookups by string_view allocate nothing (the
  // ignore_merges check runs once per piece).
  struct BytesHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, int32_t, BytesHash, std::equal_to<>> by_bytes_;
  std::array<int32_t, 256> byte_id_{};
  std::vector<Slot> pairs_;  // open addressing, power-of-two size
  uint64_t pair_mask_ = 0;
  bool ignore_merges_ = false;
  int32_t unk_id_ = -1;
};

}  // namespace meshtrain::data
