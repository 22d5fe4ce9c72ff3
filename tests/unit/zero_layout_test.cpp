// ZeRO building blocks: the owner layout is the checkpoints' shard layout,
// pieces tile any span by owner, and a reserved buffer really returns the
// pages it discards (the kernel's resident-set counter drops) and reads as
// zero afterwards without touching its neighbours.
// test-links: mt_parallel mt_ckpt
#include <gtest/gtest.h>

#include <cstring>

#include "meshtrain/ckpt/shard_layout.h"
#include "meshtrain/core/memory.h"
#include "meshtrain/parallel/reserved_buffer.h"
#include "meshtrain/parallel/zero_layout.h"

using namespace meshtrain;
using namespace meshtrain::parallel;

TEST(zero, layout_is_the_checkpoint_shard_layout) {
  for (int64_t numel : {0, 1, 5, 10944, 39865, 100003})
    for (int world = 1; world <= 7; ++world)
      for (int r = 0; r < world; ++r) {
        const ZeroLayout z(numel, world, r);
        const ckpt::ElemRange c = ckpt::shard_range(numel, world, r);
        EXPECT_EQ(z.own().begin, c.begin) << numel << " " << world << " " << r;
        EXPECT_EQ(z.own().end, c.end) << numel << " " << world << " " << r;
      }
}

TEST(zero, layout_pieces_tile_spans_by_owner) {
  const ZeroLayout z(39865, 3, 1);
  for (ElemSpan s : {ElemSpan{0, 39865}, ElemSpan{100, 13289}, ElemSpan{13288, 13290},
                     ElemSpan{26577, 39865}, ElemSpan{5, 5}}) {
    int64_t at = s.begin;
    for (const OwnedPiece& p : z.pieces(s)) {
      EXPECT_EQ(p.span.begin, at);
      EXPECT_GT(p.span.count(), 0);
      const ElemSpan range = z.range_of(p.owner);
      EXPECT_TRUE(p.span.begin >= range.begin && p.span.end <= range.end);
      at = p.span.end;
    }
    EXPECT_EQ(at, s.count() ? s.end : s.begin);
  }
  EXPECT_EQ(z.foreign_count({0, 39865}), 39865 - z.own().count());
}

TEST(zero, reserved_buffer_returns_discarded_pages) {
  const int64_t n = 16 << 20;  // 64 MiB of f32
  ReservedBuffer buf(n);
  const int64_t before = process_rss_bytes();
  float* p = buf.data();
  for (int64_t i = 0; i < n; ++i) p[i] = 1.0f;
  const int64_t touched = process_rss_bytes();
  EXPECT_GT(touched - before, 60ll << 20) << "writing did not commit the pages";
  // Discard all but 1000 elements at each end, at unaligned bounds.
  buf.discard(1000, n - 1000);
  const int64_t after = process_rss_bytes();
  EXPECT_LT(after, touched - (60ll << 20)) << "pages were not returned";
  EXPECT_EQ(p[999], 1.0f);
  EXPECT_EQ(p[1000], 0.0f);
  EXPECT_EQ(p[n / 2], 0.0f);
  EXPECT_EQ(p[n - 1001], 0.0f);
  EXPECT_EQ(p[n - 1000], 1.0f);
  p[n / 2] = 2.0f;  // pages come back on the next write
  EXPECT_EQ(p[n / 2], 2.0f);
  EXPECT_THROW(buf.discard(5, n + 1), Error);
}

TEST(zero, external_bytes_count_in_their_category) {
  const MemStats s0 = mem_stats();
  const auto i = static_cast<size_t>(MemCategory::CommBuffers);
  {
    ExternalBytes b(MemCategory::CommBuffers);
    b.set(1 << 20);
    b.add(-(1 << 19));
    EXPECT_EQ(mem_stats().current[i] - s0.current[i], 1 << 19);
    EXPECT_GE(mem_stats().peak[i], s0.current[i] + (1 << 20));
  }
  EXPECT_EQ(mem_stats().current[i], s0.current[i]);
}
