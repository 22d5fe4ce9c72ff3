// What the lossy gradient codecs (powersgd, topk, sign) share: the warmup
// (the first warmup_steps steps reduce exact f32) and error feedback (the
// residual is added to the gradient before a bucket is encoded; the codec
// writes the new residual while encoding).
#pragma once
#include <memory>

#include "meshtrain/parallel/error_feedback.h"
#include "meshtrain/parallel/gradient_codec.h"

namespace meshtrain::parallel {

class LossyCodec : public GradientCodec {
 public:
  LossyCodec(const CompressionOptions& opts, CodecContext ctx);
  void begin_step() override { ++steps_; }
  std::unique_ptr<BucketReduction> start(float* grads, ElemSpan span) final;
  int64_t state_bytes() const override { return ef_.bytes() + own_state_bytes(); }
  // What this rank did not send (element i of the flat buffer); null
  // without error feedback.
  const float* residual() const { return ef_.residual(); }
  void set_gradient_scale(float scale) override;
  void discard_feedback() override { ef_.clear(); }
  // The residual (each rank's own), the step count the warmup reads and the
  // scale the residual is kept at.
  SyncState checkpoint_state() override;
  void restore_counters(const nlohmann::json& j) override;

 protected:
  // Encodes grads[span] (the residual already added), writes the residual
  // of what it sends (when error feedback is on), launches the reduction.
  virtual std::unique_ptr<BucketReduction> compress(float* grads, ElemSpan span) = 0;
  virtual int64_t own_state_bytes() const { return 0; }
  // " after N uncompressed steps, with error feedback" for describe().
  std::string schedule_note() const;

  CompressionOptions opts_;
  CodecContext ctx_;
  ErrorFeedback ef_;

 private:
  int64_t steps_ = 0;  // begin_step() calls: 1 during the first step
  float scale_ = 1.f;  // the gradient scale the residual is kept at
};

}  // namespace meshtrain::parallel
