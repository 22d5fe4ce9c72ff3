#include "meshtrain/parallel/zero_layout.h"

#include <algorithm>

#include "meshtrain/core/error.h"

namespace meshtrain::parallel {

ElemSpan intersect(ElemSpan a, ElemSpan b) {
  ElemSpan r{std::max(a.begin, b.begin), std::min(a.end, b.end)};
  if (r.end < r.begin) r.end = r.begin;
  return r;
}

ZeroLayout::ZeroLayout(int64_t numel, int world, int rank)
    : numel_(numel), world_(world), rank_(rank) {
  MT_CHECK(numel >= 0 && world >= 1 && rank >= 0 && rank < world,
           "ZeRO layout: rank {} of {} over {} elements is out of range", rank, world, numel);
  chunk_ = (numel + world - 1) / world;
}

ElemSpan ZeroLayout::range_of(int r) const {
  return {std::min(numel_, chunk_ * r), std::min(numel_, chunk_ * (r + 1))};
}

std::vector<OwnedPiece> ZeroLayout::pieces(ElemSpan span) const {
  std::vector<OwnedPiece> out;
  if (span.count() == 0 || chunk_ == 0) return out;
  const int first = static_cast<int>(span.begin / chunk_);
  const int last = static_cast<int>((span.end - 1) / chunk_);
  for (int r = first; r <= last && r < world_; ++r) {
    const ElemSpan s = intersect(span, range_of(r));
    if (s.count() > 0) out.push_back({r, s});
  }
  return out;
}

int64_t ZeroLayout::foreign_count(ElemSpan span) const {
  return span.count() - intersect(span, own()).count();
}

}  // namespace meshtrain::parallel
