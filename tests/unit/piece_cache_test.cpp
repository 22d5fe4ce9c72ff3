// test-links: mt_data
// The tokenizer's per-thread piece cache: short pieces compare by their
// packed bytes, so every length and every byte position must tell pieces apart;
// the table grows, keeps long pieces and many-id pieces in its arenas, and
// starts over at its limit.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "meshtrain/data/piece_cache.h"

namespace meshtrain::data {
namespace {

std::string named(const char* prefix, size_t i) {
  std::string s = prefix;
  s += std::to_string(i);
  return s;
}

TEST(PieceKey, EqualPiecesFromDifferentBuffersGiveEqualKeys) {
  for (size_t n = 1; n <= 40; ++n) {
    std::string a(n + 8, 'x'), b(n + 3, 'y');
    for (size_t i = 0; i < n; ++i) a[4 + i] = b[1 + i] = static_cast<char>('a' + i % 26);
    const PieceKey ka = PieceKey::of(std::string_view(a).substr(4, n));
    const PieceKey kb = PieceKey::of(std::string_view(b).substr(1, n));
    EXPECT_EQ(ka.hash, kb.hash) << n;
    EXPECT_EQ(ka.lo, kb.lo) << n;
    EXPECT_EQ(ka.hi, kb.hi) << n;
  }
}

TEST(PieceKey, ShortPiecesPackExactlyTheirBytes) {
  for (size_t n = 1; n <= PieceKey::kInlineBytes; ++n) {
    std::string s;
    for (size_t i = 0; i < n; ++i) s.push_back(static_cast<char>(0x80 + i));
    const PieceKey k = PieceKey::of(s);
    uint64_t lo = 0, hi = 0;
    for (size_t i = 0; i < n; ++i) {
      const uint64_t byte = static_cast<uint8_t>(s[i]);
      (i < 8 ? lo : hi) |= byte << (8 * (i % 8));
    }
    EXPECT_EQ(k.lo, lo) << n;
    EXPECT_EQ(k.hi, hi) << n;
  }
}

TEST(PieceCache, FindsWhatWasInsertedAndNothingElse) {
  PieceCache cache;
  std::vector<std::string> pieces;
  // Every length up to 40 (inline and arena keys), every byte position changed.
  for (size_t n = 1; n <= 40; ++n) {
    const std::string base(n, 'q');
    pieces.push_back(base);
    for (size_t i = 0; i < n; ++i) {
      std::string s = base;
      s[i] = 'r';
      pieces.push_back(s);
    }
  }
  // Enough distinct pieces to make the table grow several times.
  for (int i = 0; i < 20000; ++i) pieces.push_back(named(" w", i));
  auto ids_of = [](size_t i) {
    std::vector<int32_t> ids(1 + i % 4);  // 1-4 ids: inline and arena
    for (size_t j = 0; j < ids.size(); ++j) ids[j] = static_cast<int32_t>(i * 7 + j);
    return ids;
  };
  for (size_t i = 0; i < pieces.size(); ++i) {
    const std::vector<int32_t> ids = ids_of(i);
    uint32_t count = 0;
    ASSERT_EQ(cache.find(PieceKey::of(pieces[i]), &count), nullptr) << pieces[i];
    cache.insert(PieceKey::of(pieces[i]), ids.data(), static_cast<uint32_t>(ids.size()));
  }
  EXPECT_EQ(cache.size(), pieces.size());
  EXPECT_GT(cache.slots(), PieceCache::kMinSlots);
  for (size_t i = 0; i < pieces.size(); ++i) {
    const std::vector<int32_t> want = ids_of(i);
    uint32_t count = 0;
    const int32_t* got = cache.find(PieceKey::of(pieces[i]), &count);
    ASSERT_NE(got, nullptr) << pieces[i];
    EXPECT_EQ(std::vector<int32_t>(got, got + count), want) << pieces[i];
  }
  uint32_t count = 0;
  EXPECT_EQ(cache.find(PieceKey::of("never inserted"), &count), nullptr);
}

TEST(PieceCache, StartsOverAtItsLimit) {
  PieceCache cache;
  const int32_t id = 5;
  const size_t limit = PieceCache::kMaxSlots / 2;
  for (size_t i = 0; i <= limit; ++i) cache.insert(PieceKey::of(named("p", i)), &id, 1);
  EXPECT_EQ(cache.slots(), PieceCache::kMaxSlots);
  EXPECT_EQ(cache.size(), 1u);  // the last insert found it full and started over
  uint32_t count = 0;
  EXPECT_NE(cache.find(PieceKey::of(named("p", limit)), &count), nullptr);
  EXPECT_EQ(cache.find(PieceKey::of("p0"), &count), nullptr);
}

}  // namespace
}  // namespace meshtrain::data
