// Mixed precision's 16-bit compute copy of a model's parameters, the same
// for every family: the model's own buffer (rounded from the f32 masters at
// each unit's forward Need), or an external one that ZeRO keeps current.
// Which parameters it holds is the layout's ParamInfo::half_weight.
#pragma once
#include <cstdint>
#include <vector>

#include "meshtrain/core/memory.h"
#include "meshtrain/core/tensor.h"
#include "meshtrain/kernels/kernel_table.h"
#include "meshtrain/nn/model.h"
#include "meshtrain/nn/precision.h"

namespace meshtrain {

class HalfWeights {
 public:
  // Returns whether the precision changed (the model then drops its
  // activation layout, which depends on it). A mixed precision allocates an
  // own copy of `numel` 16-bit values (MemCategory::Parameters).
  bool set_precision(Precision p, int64_t numel, Device device = Device::cpu());
  // The copy lives in `buffer` and is kept current by the caller.
  void use_external(Tensor buffer, int64_t numel);
  Precision precision() const { return precision_; }
  bool mixed() const { return is_mixed(precision_); }
  bool external() const { return external_; }
  HalfFormat format() const { return half_of(precision_); }
  // The 16-bit value of flat element `offset`.
  const uint16_t* at(int64_t offset) const { return buf_.data<uint16_t>() + offset; }
  // Rounds `unit`'s half_weight parameters from `params` (own copy only).
  void refresh(const ParamLayout& layout, int unit, const float* params, const KernelTable& k);
  // A frozen model's parameters never change after its first forward: each
  // unit is rounded once (at its first refresh), not at every Need.
  void freeze() { frozen_ = true; }
  // Held (a step's micro-batches, Model::hold_parameters): the parameters do
  // not change, so each unit is rounded at its first refresh only; letting
  // go makes the next refresh of every unit round again.
  void hold(bool held) {
    held_ = held;
    if (!held_ && !frozen_) fresh_.clear();
  }
  // Frozen and mixed: the model computes with this copy only, so the f32
  // values of the half_weight parameters can go. Rounds every unit now,
  // hands their pages in `params` back to the system (those values read as
  // zero afterwards) and stops counting their bytes as held. Returns the
  // bytes released.
  int64_t release_masters(const ParamLayout& layout, float* params, const KernelTable& k);
  bool released() const { return released_.bytes() != 0; }
  // After release_masters: writes the half_weight parameters' values,
  // widened from this copy, into `dst` (a layout-sized f32 buffer).
  void widen_released(const ParamLayout& layout, float* dst, const KernelTable& k) const;

 private:
  Precision precision_ = Precision::FP32;
  Tensor buf_;
  bool external_ = false;
  bool frozen_ = false, held_ = false;
  std::vector<char> fresh_;  // frozen or held: units already rounded
  ExternalBytes released_{MemCategory::Parameters};  // minus the f32 bytes handed back
};

// recompute every:K needs K >= 1.
void check_recompute(const Recompute& recompute);

}  // namespace meshtrain
