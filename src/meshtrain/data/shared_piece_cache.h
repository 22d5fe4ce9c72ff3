// The encoded pieces every encoding thread of one tokenizer shares: a piece
// merged by one thread is a lookup for the others (each thread's own
// PieceCache (piece_cache.h) stays the fast path; this one sees only
// its misses). Insert-only and lock-free: a slot is claimed with one
// compare-and-swap, filled, then published; a reader skips slots still being
// written (a miss at worst, never a wrong answer). Fixed arenas: when they
// are full it stops taking new pieces.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <string_view>

namespace meshtrain::data {

class SharedPieceCache {
 public:
  SharedPieceCache();
  // The ids of `piece` (hash: PieceKey::of(piece).hash), or null.
  const int32_t* find(std::string_view piece, uint64_t hash, uint32_t* count) const;
  void insert(std::string_view piece, uint64_t hash, const int32_t* ids, uint32_t count);

  static constexpr size_t kSlots = size_t{1} << 18;
  static constexpr size_t kBytes = size_t{4} << 20;  // piece bytes
  static constexpr size_t kIds = size_t{1} << 20;    // token ids

 private:
  enum : uint32_t { kEmpty = 0, kWriting = 1, kReady = 2 };
  struct Slot {
    std::atomic<uint32_t> state{kEmpty};
    uint32_t len = 0, count = 0, key_at = 0, ids_at = 0;
    uint64_t hash = 0;
  };
  static constexpr size_t kMaxProbes = 64;
  std::unique_ptr<Slot[]> slots_;
  std::unique_ptr<char[]> bytes_;
  std::unique_ptr<int32_t[]> ids_;
  std::atomic<size_t> bytes_used_{0}, ids_used_{0}, slots_used_{0};
};

}  // namespace meshtrain::data
