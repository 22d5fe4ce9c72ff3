// Which rank owns which elements of a flat buffer under ZeRO: rank r owns
// the equal contiguous range [r*ceil(P/N), min(P, (r+1)*ceil(P/N))), the
// same split the checkpoint shards use (ckpt::shard_range; a test pins the
// two together), so every stage saves and reshards the same way. A unit or
// bucket that spans several owners is handled piece by piece.
#pragma once
#include <cstdint>
#include <vector>

#include "meshtrain/core/elem_span.h"

namespace meshtrain::parallel {

using ::meshtrain::ElemSpan;

// The part of `span` owned by `owner`.
struct OwnedPiece {
  int owner = 0;
  ElemSpan span;
};

class ZeroLayout {
 public:
  ZeroLayout() = default;
  ZeroLayout(int64_t numel, int world, int rank);
  int64_t numel() const { return numel_; }
  int world() const { return world_; }
  int rank() const { return rank_; }
  // Rank r's range (empty for trailing ranks when numel < world).
  ElemSpan range_of(int r) const;
  ElemSpan own() const { return range_of(rank_); }
  // The non-empty pieces of `span`, one per owner, in buffer order.
  std::vector<OwnedPiece> pieces(ElemSpan span) const;
  // Elements of `span` this rank does not own.
  int64_t foreign_count(ElemSpan span) const;

 private:
  int64_t numel_ = 0, chunk_ = 0;
  int world_ = 1, rank_ = 0;
};

ElemSpan intersect(ElemSpan a, ElemSpan b);

}  // namespace meshtrain::parallel
