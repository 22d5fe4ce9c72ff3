#include "meshtrain/optim/tensor_norms.h"

#include "meshtrain/core/error.h"

namespace meshtrain {

std::vector<double> TensorNorms::sums(const NormGroup& g, const std::vector<ParamSegment>& segments,
                                      ElemSpan range, int ntensors, int k, const PieceSums& f) {
  const std::vector<ElemSpan> slots = g.slots.empty() ? std::vector<ElemSpan>{range} : g.slots;
  MT_CHECK(g.own < static_cast<int>(slots.size()), "norm slot {} of {}", g.own, slots.size());
  const size_t width = static_cast<size_t>(ntensors) * static_cast<size_t>(k);
  std::vector<double> partial(slots.size() * width, 0.0);
  for (size_t s = 0; s < slots.size(); ++s) {
    if (g.own >= 0 && static_cast<int>(s) != g.own) continue;
    for (const ParamSegment& piece : clip_segments(segments, slots[s].begin, slots[s].end)) {
      MT_CHECK(piece.tensor >= 0 && piece.tensor < ntensors, "layer norms need one segment per "
               "tensor (got index {} of {})", piece.tensor, ntensors);
      f(piece, &partial[s * width + static_cast<size_t>(piece.tensor) * k]);
    }
  }
  // Every slot has one contributing rank, so this sum is exact in any order.
  if (g.own >= 0 && g.shards && g.shards->size() > 1)
    g.shards->allreduce(partial.data(), partial.size(), DType::F64, comm::ReduceOp::Sum).wait();
  std::vector<double> out(width, 0.0);
  for (size_t s = 0; s < slots.size(); ++s)
    for (size_t i = 0; i < width; ++i) out[i] += partial[s * width + i];
  if (g.tp && g.tp->size() > 1) {
    if (g.tp->rank() != 0)
      for (size_t t = 0; t < g.tp_replicated.size() && t < static_cast<size_t>(ntensors); ++t)
        if (g.tp_replicated[t])
          for (int j = 0; j < k; ++j) out[t * k + static_cast<size_t>(j)] = 0.0;
    g.tp->allreduce(out.data(), out.size(), DType::F64, comm::ReduceOp::Sum).wait();
  }
  return out;
}

}  // namespace meshtrain
