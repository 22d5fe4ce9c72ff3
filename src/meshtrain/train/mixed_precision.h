// The optimizer side of mixed precision (config `precision`): puts the model
// in bf16/fp16 compute (Model::set_precision: f32 master weights in the
// parameter buffer, a 16-bit compute copy for the GEMMs), and for fp16 owns the dynamic loss
// scaler: the loss scale backward multiplies by, and the skip/apply decision
// taken from the overflow flag reduced over every rank.
//
// The gradient buffer stays f32 in every precision; the data-parallel
// reduction of it is parallel/'s (comm.grad_dtype picks its wire format).
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "meshtrain/nn/model.h"
#include "meshtrain/nn/precision.h"
#include "meshtrain/optim/loss_scaler.h"

namespace meshtrain {

struct MixedPrecisionOptions {
  Precision precision = Precision::FP32;
  LossScalerConfig loss_scale;  // fp16 only
};

class MixedPrecision {
 public:
  // Sets `model`'s compute precision.
  MixedPrecision(Model& model, MixedPrecisionOptions opt);

  Precision precision() const { return opt_.precision; }
  // The factor backward multiplies the loss by: the loss scale with fp16, else 1.
  float loss_scale() const { return scaler_ ? scaler_->scale() : 1.0f; }
  // Decides a step from whether its loss and gradients are finite on EVERY
  // rank (a reduced flag, so all ranks decide alike). fp16: the loss scaler
  // records it (halving the scale on overflow, growing it after a window;
  // throws after too many consecutive overflows) and an overflowing step is
  // skipped. Returns whether to apply the update.
  bool decide(bool finite_on_every_rank);
  // True when the last decide() skipped an fp16 overflow (a normal event
  // with loss scaling, not divergence).
  bool last_was_overflow() const { return last_overflow_; }
  const LossScaler* scaler() const { return scaler_.get(); }

  // Test hook MESHTRAIN_TEST_INJECT_INF="STEP[:RANK]" (STEP 0-based, RANK
  // default 0): writes +inf into the first element of this rank's gradient
  // range at that step, after the gradients were reduced, so only that
  // rank's local check sees it.
  // `grads` lives on `device`.
  void maybe_inject_overflow(int64_t step, int rank, float* grads, int64_t begin, int64_t end,
                             Device device = Device::cpu()) const;

  // Loss scaler state for checkpoints (null without fp16).
  nlohmann::json state() const;
  void load_state(const nlohmann::json& j);

  // One line for the training log: precision, GEMM path, loss scaling.
  std::string describe() const;

 private:
  MixedPrecisionOptions opt_;
  Device device_;  // the model's: which GEMMs describe() names
  std::unique_ptr<LossScaler> scaler_;
  bool last_overflow_ = false;
  int64_t inject_step_ = -1;
  int inject_rank_ = 0;
};

}  // namespace meshtrain
