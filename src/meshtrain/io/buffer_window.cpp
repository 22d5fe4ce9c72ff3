#include "meshtrain/io/buffer_window.h"

#include <algorithm>

#include "meshtrain/core/error.h"

namespace meshtrain {

BufferWindow BufferWindow::shard(const Tensor& flat, ElemSpan range, const ParamLayout& logical,
                                 const ParamLayout& shard_layout, int tp_rank) {
  MT_CHECK(flat.numel() == shard_layout.numel, "a shard window over {} elements for a shard of {}",
           flat.numel(), shard_layout.numel);
  return {flat, range, shard_runs(logical, shard_layout, tp_rank), logical.numel};
}

void BufferWindow::check_fits(int64_t model_numel, const std::string& what) const {
  // A shard's window covers the logical layout its runs were made from.
  const int64_t covered = runs.empty() ? flat.numel() : logical_numel;
  MT_CHECK(covered == model_numel && (flat.dtype() == DType::F32 || is_whole()),
           "{}: parameter buffer of {} {}{} for a model of {} f32", what, flat.numel(),
           dtype_name(flat.dtype()),
           runs.empty() ? "" : fmt::format(" (a tensor-parallel shard of a {}-parameter model)", logical_numel),
           model_numel);
  MT_CHECK(range.begin >= 0 && range.begin <= range.end && range.end <= flat.numel(),
           "{}: elements [{}, {}) of a {}-element buffer", what, range.begin, range.end, flat.numel());
}

void BufferWindow::put(const ParamInfo& p, const std::function<void(const Tensor&)>& fill) const {
  MT_CHECK(flat.dtype() == DType::F32 || is_whole(),
           "a partial load needs an f32 buffer, not {}", dtype_name(flat.dtype()));
  // Where p's elements go: (destination, offset in p, count) pieces inside the range.
  struct Piece {
    int64_t dst, src, count;
  };
  std::vector<Piece> pieces;
  auto add = [&](int64_t dst, int64_t src, int64_t count) {
    const int64_t b = std::max(dst, range.begin), e = std::min(dst + count, range.end);
    if (b < e) pieces.push_back({b, src + (b - dst), e - b});
  };
  if (runs.empty()) {
    add(p.begin, 0, p.numel());
  } else {  // runs come in parameter order, each parameter's by increasing logical offset
    auto it = std::lower_bound(runs.begin(), runs.end(), p.begin,
                               [](const ShardRun& r, int64_t at) { return r.logical < at; });
    for (; it != runs.end() && it->logical < p.end(); ++it) add(it->shard, it->logical - p.begin, it->count);
  }
  if (pieces.empty()) return;
  if (pieces.size() == 1 && pieces[0].src == 0 && pieces[0].count == p.numel())
    return fill(flat.slice_flat(pieces[0].dst, p.numel()).reshape(p.shape));  // in place
  Tensor staging = Tensor::zeros(p.shape, DType::F32);
  fill(staging);
  const float* s = staging.data<float>();
  float* d = flat.data<float>();
  for (const Piece& q : pieces) std::copy_n(s + q.src, q.count, d + q.dst);
}

}  // namespace meshtrain
