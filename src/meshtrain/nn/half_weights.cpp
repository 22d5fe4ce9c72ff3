#include "meshtrain/nn/half_weights.h"

#include "meshtrain/core/error.h"

namespace meshtrain {

bool HalfWeights::set_precision(Precision p, int64_t numel) {
  if (p == precision_) return false;
  precision_ = p;
  buf_ = is_mixed(p) ? Tensor::zeros({numel}, p == Precision::BF16 ? DType::BF16 : DType::F16,
                                     MemCategory::Parameters)
                     : Tensor();
  external_ = false;
  fresh_.clear();
  return true;
}

void HalfWeights::use_external(Tensor buffer, int64_t numel) {
  MT_CHECK(mixed(), "use_external_half_copy() needs a mixed precision, not {}",
           precision_name(precision_));
  MT_CHECK(buffer.numel() == numel && buffer.dtype() == buf_.dtype(),
           "external 16-bit copy: {} elements of the wrong dtype, expected {} {}", buffer.numel(),
           numel, precision_name(precision_));
  buf_ = std::move(buffer);
  external_ = true;
}

void HalfWeights::refresh(const ParamLayout& layout, int unit, const float* params,
                          const KernelTable& k) {
  if (!mixed() || external_) return;
  if (frozen_) {
    if (fresh_.size() != layout.units.size()) fresh_.assign(layout.units.size(), 0);
    if (fresh_[static_cast<size_t>(unit)]) return;
    fresh_[static_cast<size_t>(unit)] = 1;
  }
  for (const ParamInfo& p : layout.params)
    if (p.unit == unit && p.half_weight)
      k.to_half(format(), params + p.begin, buf_.data<uint16_t>() + p.begin, p.numel());
}

void check_recompute(const Recompute& recompute) {
  MT_CHECK(recompute.mode != Recompute::Mode::EveryK || recompute.every >= 1,
           "recompute every:K needs K >= 1 (got {})", recompute.every);
}

}  // namespace meshtrain
