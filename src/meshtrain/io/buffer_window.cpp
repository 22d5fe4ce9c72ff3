#include "meshtrain/io/buffer_window.h"

#include <algorithm>

namespace meshtrain {

ElemSpan BufferWindow::part(const ParamInfo& p) const {
  const int64_t b = std::max(p.begin, range.begin), e = std::min(p.end(), range.end);
  return b < e ? ElemSpan{b, e} : ElemSpan{b, b};
}

void BufferWindow::put(const ParamInfo& p, const std::function<void(const Tensor&)>& fill) const {
  const ElemSpan want = part(p);
  if (want.count() == 0) return;
  if (want.count() == p.numel()) return fill(flat.slice_flat(p.begin, p.numel()).reshape(p.shape));
  Tensor staging = Tensor::zeros(p.shape, DType::F32);
  fill(staging);
  flat.slice_flat(want.begin, want.count()).copy_from(staging.slice_flat(want.begin - p.begin, want.count()));
}

}  // namespace meshtrain
