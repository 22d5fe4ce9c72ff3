#include "meshtrain/nn/half_weights.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "meshtrain/core/error.h"

namespace meshtrain {

bool HalfWeights::set_precision(Precision p, int64_t numel, Device device) {
  if (p == precision_) return false;
  MT_CHECK(!released(), "the frozen model's f32 matrices were released; its precision stays {}",
           precision_name(precision_));
  precision_ = p;
  buf_ = is_mixed(p) ? Tensor::zeros({numel}, p == Precision::BF16 ? DType::BF16 : DType::F16,
                                     MemCategory::Parameters, device)
                     : Tensor();
  external_ = false;
  fresh_.clear();
  return true;
}

void HalfWeights::use_external(Tensor buffer, int64_t numel) {
  MT_CHECK(!released(), "the frozen model's f32 matrices were released: its own 16-bit copy is "
           "the only one left, so it cannot take an external one");
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
  if (frozen_ || held_) {
    if (fresh_.size() != layout.units.size()) fresh_.assign(layout.units.size(), 0);
    if (fresh_[static_cast<size_t>(unit)]) return;
    fresh_[static_cast<size_t>(unit)] = 1;
  }
  for (const ParamInfo& p : layout.params)
    if (p.unit == unit && p.half_weight)
      k.to_half(default_stream(k.device), format(), params + p.begin, buf_.data<uint16_t>() + p.begin, p.numel());
}

int64_t HalfWeights::release_masters(const ParamLayout& layout, float* params, const KernelTable& k) {
  MT_CHECK(frozen_ && mixed() && !external_, "only a frozen model computing with its own 16-bit "
           "copy (mixed precision) can release its f32 matrices; this one is {}{}",
           frozen_ ? "" : "trained, ", precision_name(precision_));
  if (released()) return -released_.bytes();
  fresh_.clear();  // round from the values as they are now, whatever an earlier forward rounded
  for (int u = 0; u < layout.num_units(); ++u) refresh(layout, u, params, k);
  // Adjacent parameters merge into one range, so whole pages cover most of it.
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  int64_t bytes = 0;
  auto hand_back = [&](int64_t begin, int64_t end) {
    if (end <= begin) return;
    bytes += (end - begin) * static_cast<int64_t>(sizeof(float));
    const auto lo = (reinterpret_cast<uintptr_t>(params + begin) + page - 1) / page * page;
    const auto hi = reinterpret_cast<uintptr_t>(params + end) / page * page;
    if (hi > lo)
      MT_CHECK(madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED) == 0,
               "releasing {} bytes of frozen f32 matrices failed: {}", hi - lo, std::strerror(errno));
  };
  int64_t begin = 0, end = 0;
  for (const ParamInfo& p : layout.params) {
    if (!p.half_weight) continue;
    if (p.begin != end) {
      hand_back(begin, end);
      begin = p.begin;
    }
    end = p.end();
  }
  hand_back(begin, end);
  released_.set(-bytes);
  return bytes;
}

void HalfWeights::widen_released(const ParamLayout& layout, float* dst, const KernelTable& k) const {
  MT_CHECK(released(), "widen_released: the f32 matrices were not released");
  for (const ParamInfo& p : layout.params)
    if (p.half_weight) k.from_half(default_stream(k.device), format(), buf_.data<uint16_t>() + p.begin, dst + p.begin, p.numel());
}

void check_recompute(const Recompute& recompute) {
  MT_CHECK(recompute.mode != Recompute::Mode::EveryK || recompute.every >= 1,
           "recompute every:K needs K >= 1 (got {})", recompute.every);
}

}  // namespace meshtrain
