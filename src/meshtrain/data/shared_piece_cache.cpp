#include "meshtrain/data/shared_piece_cache.h"

#include <cstring>

namespace meshtrain::data {

SharedPieceCache::SharedPieceCache()
    : slots_(new Slot[kSlots]), bytes_(new char[kBytes]), ids_(new int32_t[kIds]) {}

const int32_t* SharedPieceCache::find(std::string_view piece, uint64_t hash, uint32_t* count) const {
  size_t i = hash & (kSlots - 1);
  for (size_t probe = 0; probe < kMaxProbes; ++probe, i = (i + 1) & (kSlots - 1)) {
    const Slot& s = slots_[i];
    const uint32_t state = s.state.load(std::memory_order_acquire);
    if (state == kEmpty) return nullptr;
    if (state != kReady) continue;  // being written: not visible yet
    if (s.hash == hash && s.len == piece.size() &&
        std::memcmp(bytes_.get() + s.key_at, piece.data(), piece.size()) == 0) {
      *count = s.count;
      return ids_.get() + s.ids_at;
    }
  }
  return nullptr;
}

void SharedPieceCache::insert(std::string_view piece, uint64_t hash, const int32_t* ids,
                              uint32_t count) {
  // Half the slots at most, so probes stay short; then it stops growing.
  if (slots_used_.load(std::memory_order_relaxed) >= kSlots / 2) return;
  const size_t key_at = bytes_used_.fetch_add(piece.size(), std::memory_order_relaxed);
  const size_t ids_at = ids_used_.fetch_add(count, std::memory_order_relaxed);
  if (key_at + piece.size() > kBytes || ids_at + count > kIds) return;  // arenas full
  std::memcpy(bytes_.get() + key_at, piece.data(), piece.size());
  std::memcpy(ids_.get() + ids_at, ids, sizeof(int32_t) * count);
  size_t i = hash & (kSlots - 1);
  for (size_t probe = 0; probe < kMaxProbes; ++probe, i = (i + 1) & (kSlots - 1)) {
    Slot& s = slots_[i];
    uint32_t expected = kEmpty;
    if (s.state.compare_exchange_strong(expected, kWriting, std::memory_order_acq_rel)) {
      s.hash = hash;
      s.len = static_cast<uint32_t>(piece.size());
      s.count = count;
      s.key_at = static_cast<uint32_t>(key_at);
      s.ids_at = static_cast<uint32_t>(ids_at);
      s.state.store(kReady, std::memory_order_release);
      slots_used_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    // Taken: by this very piece (another thread merged it too) or a neighbour.
    if (expected == kReady && s.hash == hash && s.len == piece.size() &&
        std::memcmp(bytes_.get() + s.key_at, piece.data(), piece.size()) == 0)
      return;
  }
}

}  // namespace meshtrain::data
