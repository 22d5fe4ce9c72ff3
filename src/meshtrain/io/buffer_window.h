// Reading a model's tensors into a flat f32 buffer: all of it, only the
// elements of one range (ZeRO's own range), and/or a tensor-parallel shard's
// slices of each tensor. Nothing outside the window is written, so a rank
// that keeps part of the model never holds the whole of it while it loads.
// Loaders hand each logical parameter to put(): one wholly wanted and laid
// out as in the file is read in place; any other goes through a staging
// tensor of its logical shape (one at a time), of which the wanted elements
// are copied.
#pragma once
#include <functional>
#include <vector>

#include "meshtrain/core/elem_span.h"
#include "meshtrain/core/tensor.h"
#include "meshtrain/nn/model.h"
#include "meshtrain/nn/shard_slicing.h"

namespace meshtrain {

struct BufferWindow {
  Tensor flat;     // the destination buffer, f32 (a shard's layout when runs is set)
  ElemSpan range;  // the elements of `flat` to write
  // Tensor parallelism: where each logical element lands in `flat`
  // (shard_runs of the logical layout and this shard's); empty: flat is in
  // the logical layout itself.
  std::vector<ShardRun> runs;
  int64_t logical_numel = -1;  // with runs: the logical layout's size

  static BufferWindow whole(const Tensor& flat) { return {flat, {0, flat.numel()}, {}, -1}; }
  // Tensor-parallel rank tp_rank's slices, elements [range) of its buffer.
  static BufferWindow shard(const Tensor& flat, ElemSpan range, const ParamLayout& logical,
                            const ParamLayout& shard_layout, int tp_rank);
  bool is_whole() const { return runs.empty() && range == ElemSpan{0, flat.numel()}; }
  // Throws unless the buffer fits a model of `model_numel` parameters
  // (`what` names the source for the message).
  void check_fits(int64_t model_numel, const std::string& what) const;
  // Writes the wanted elements of logical parameter `p` (its ParamInfo in the
  // logical layout); `fill` fills a tensor of p's shape.
  void put(const ParamInfo& p, const std::function<void(const Tensor&)>& fill) const;
};

}  // namespace meshtrain
