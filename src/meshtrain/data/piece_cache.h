// Per-thread cache of encoded pieces: natural text repeats its words, and a
// lookup is far cheaper than merging. A flat open-addressing table whose
// 32-byte slots hold a piece of up to 16 bytes and up to 2 ids inline, so a
// lookup of a typical word touches one cache line and nothing else; longer
// pieces keep their bytes and ids in two arenas. The table starts small and
// doubles while half full (its size follows the text's vocabulary, not a
// fixed worst case); past kMaxSlots it starts over.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace meshtrain::data {

// A piece as the caches look it up: its hash and, up to 16 bytes, its bytes
// zero-padded into two words (compared without touching the text).
struct PieceKey {
  std::string_view piece;
  uint64_t hash = 0;
  uint64_t lo = 0, hi = 0;  // bytes 0-7 and 8-15 (short pieces only)

  static constexpr size_t kInlineBytes = 16;
  static PieceKey of(std::string_view piece);
  bool short_piece() const { return piece.size() <= kInlineBytes; }
};

class PieceCache {
 public:
  static constexpr size_t kMinSlots = size_t{1} << 12;
  static constexpr size_t kMaxSlots = size_t{1} << 18;

  // The cached ids of the key's piece, or null. Valid until the next insert.
  const int32_t* find(const PieceKey& k, uint32_t* count) const;
  void insert(const PieceKey& k, const int32_t* ids, uint32_t count);
  // Starts loading the key's first slot into the CPU cache (a hint only).
  void prefetch(const PieceKey& k) const {
    if (!slots_.empty()) __builtin_prefetch(&slots_[k.hash & (slots_.size() - 1)]);
  }
  void clear();
  size_t slots() const { return slots_.size(); }
  size_t size() const { return used_; }

  uint64_t serial = 0;  // which tokenizer the entries belong to

 private:
  struct Slot {
    uint32_t hash = 0;  // the key's low 32 bits (also the slot index)
    uint16_t len = 0;   // 0 = empty (pieces are non-empty)
    uint16_t count = 0;
    uint64_t lo = 0, hi = 0;  // the bytes inline, or lo = the arena offset
    int32_t ids[2] = {0, 0};  // the ids inline (count <= 2), or ids[0] = the arena offset
  };
  static_assert(sizeof(Slot) == 32);
  bool same(const Slot& s, const PieceKey& k) const;
  void place(const Slot& s);
  void grow();

  std::vector<Slot> slots_;
  std::string bytes_;
  std::vector<int32_t> ids_;
  size_t used_ = 0;
};

}  // namespace meshtrain::data
