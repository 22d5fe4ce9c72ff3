// Reading a model's tensors into its flat f32 buffer, whole or only the
// elements of one range (ZeRO's own range): nothing outside the range is
// written, so a rank that keeps a range never holds the whole model while it
// loads. A parameter wholly inside is read in place; one the range cuts goes
// through a staging tensor of its shape, of which the wanted part is copied
// (at most two per range).
#pragma once
#include <functional>

#include "meshtrain/core/elem_span.h"
#include "meshtrain/core/tensor.h"
#include "meshtrain/nn/model.h"

namespace meshtrain {

struct BufferWindow {
  Tensor flat;     // the whole flat buffer (its layout's numel elements, f32)
  ElemSpan range;  // the elements to write

  static BufferWindow whole(const Tensor& flat) { return {flat, {0, flat.numel()}}; }
  // The part of `p` inside the range (empty when none).
  ElemSpan part(const ParamInfo& p) const;
  // Writes p's elements inside the range; `fill` fills a tensor of p's shape.
  void put(const ParamInfo& p, const std::function<void(const Tensor&)>& fill) const;
};

}  // namespace meshtrain
