#include "meshtrain/data/piece_cache.h"

#include <cstring>
#include <functional>

namespace meshtrain::data {

namespace {

uint64_t load(const char* p, size_t n) {  // n <= 8 bytes, little-endian
  uint64_t v = 0;
  std::memcpy(&v, p, n);
  return v;
}

// Bytes 0..n-1 (n <= 8) packed into a word with overlapping fixed-size loads,
// so a short piece costs no variable-length copy and reads nothing past its end.
uint64_t pack(const char* p, size_t n) {
  if (n >= 4) {
    const uint64_t first = load(p, 4), last = load(p + n - 4, 4);
    return first | (last << (8 * (n - 4)));
  }
  if (n == 0) return 0;
  const auto b = [&](size_t i) { return static_cast<uint64_t>(static_cast<uint8_t>(p[i])); };
  return b(0) | (b(n / 2) << (8 * (n / 2))) | (b(n - 1) << (8 * (n - 1)));
}

uint64_t mix(uint64_t lo, uint64_t hi, uint64_t len) {
  uint64_t h = lo * 0x9E3779B97F4A7C15ull ^ (hi + len) * 0xC2B2AE3D27D4EB4Full;
  h ^= h >> 32;
  h *= 0x165667B19E3779F9ull;
  return h ^ (h >> 29);
}

}  // namespace

PieceKey PieceKey::of(std::string_view piece) {
  PieceKey k;
  k.piece = piece;
  const size_t n = piece.size();
  if (n > kInlineBytes) {
    k.hash = std::hash<std::string_view>{}(piece);
    return k;
  }
  const char* p = piece.data();
  if (n > 8) {
    k.lo = load(p, 8);
    k.hi = load(p + n - 8, 8) >> (8 * (16 - n));
  } else {
    k.lo = pack(p, n);
  }
  k.hash = mix(k.lo, k.hi, n);
  return k;
}

bool PieceCache::same(const Slot& s, const PieceKey& k) const {
  if (s.hash != static_cast<uint32_t>(k.hash) || s.len != k.piece.size()) return false;
  if (k.short_piece()) return s.lo == k.lo && s.hi == k.hi;
  return std::memcmp(bytes_.data() + s.lo, k.piece.data(), k.piece.size()) == 0;
}

const int32_t* PieceCache::find(const PieceKey& k, uint32_t* count) const {
  if (slots_.empty()) return nullptr;
  const size_t mask = slots_.size() - 1;
  for (size_t i = k.hash & mask;; i = (i + 1) & mask) {
    const Slot& s = slots_[i];
    if (s.len == 0) return nullptr;
    if (same(s, k)) {
      *count = s.count;
      return s.count <= 2 ? s.ids : ids_.data() + s.ids[0];
    }
  }
}

void PieceCache::place(const Slot& s) {
  const size_t mask = slots_.size() - 1;
  size_t i = s.hash & mask;
  while (slots_[i].len != 0) i = (i + 1) & mask;
  slots_[i] = s;
}

void PieceCache::grow() {
  std::vector<Slot> old(slots_.size() * 2);
  old.swap(slots_);
  for (const Slot& s : old)
    if (s.len != 0) place(s);
}

void PieceCache::insert(const PieceKey& k, const int32_t* ids, uint32_t count) {
  if (slots_.empty()) slots_.resize(kMinSlots);
  if ((used_ + 1) * 2 > slots_.size()) {
    if (slots_.size() < kMaxSlots) grow();
    else clear();
  }
  Slot s;
  s.hash = static_cast<uint32_t>(k.hash);
  s.len = static_cast<uint16_t>(k.piece.size());
  s.count = static_cast<uint16_t>(count);
  if (k.short_piece()) {
    s.lo = k.lo, s.hi = k.hi;
  } else {
    s.lo = bytes_.size();
    bytes_.append(k.piece);
  }
  if (count <= 2) {
    // A piece may encode to no ids at all (ids is then null, which memcpy
    // must not be given even for zero bytes).
    if (count > 0) std::memcpy(s.ids, ids, sizeof(int32_t) * count);
  } else {
    s.ids[0] = static_cast<int32_t>(ids_.size());
    ids_.insert(ids_.end(), ids, ids + count);
  }
  place(s);
  ++used_;
}

void PieceCache::clear() {
  std::fill(slots_.begin(), slots_.end(), Slot{});
  bytes_.clear();
  ids_.clear();
  used_ = 0;
}

}  // namespace meshtrain::data
