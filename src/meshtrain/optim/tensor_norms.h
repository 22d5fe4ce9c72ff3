// Per-layer sums (LARS's and LAMB's norms) over a flat buffer whose layers a
// ZeRO range may cut: each rank sums its pieces of each layer, and the
// pieces' sums are added across the ranks that hold them. The sums are
// taken per data-parallel slot (the ZeRO ranges) and added in slot order
// whether one rank computes them all (replicated data parallelism) or each
// rank its own (ZeRO), so both give bit-identical norms; tensor parallelism
// adds a split layer's shards over the tp group (a replicated layer counted
// once).
#pragma once
#include <functional>
#include <vector>

#include "meshtrain/comm/communicator.h"
#include "meshtrain/core/elem_span.h"
#include "meshtrain/optim/param_segments.h"

namespace meshtrain {

struct NormGroup {
  // The ranges whose sums are added, in this order (one per data-parallel
  // rank, its ZeRO range); empty = the optimizer's own range as one slot.
  std::vector<ElemSpan> slots;
  // >= 0: this rank computes only slots[own], and the slots are gathered
  // over `shards` (ZeRO); -1: this rank computes every slot (replicated).
  int own = -1;
  comm::Communicator* shards = nullptr;
  // Tensor parallelism (null or size 1: none): per layer, whether it is the
  // same on every tp rank (counted by tp rank 0 only) or split.
  comm::Communicator* tp = nullptr;
  std::vector<bool> tp_replicated;
};

class TensorNorms {
 public:
  // Adds the k partial sums of `piece` (one layer's, within one slot) to out[0..k).
  using PieceSums = std::function<void(const ParamSegment& piece, double* out)>;
  // Sums over whole layers: out[t * k + j] for layer t = 0..ntensors-1.
  // `segments` are the rank's layers (tensor >= 0) to sum, clipped to
  // `range`, the rank's elements. Collective over the group's communicators.
  static std::vector<double> sums(const NormGroup& g, const std::vector<ParamSegment>& segments,
                                  ElemSpan range, int ntensors, int k, const PieceSums& f);
};

}  // namespace meshtrain
