#include "meshtrain/parallel/lossy_codec.h"

#include <fmt/format.h>

namespace meshtrain::parallel {

LossyCodec::LossyCodec(const CompressionOptions& opts, CodecContext ctx)
    : opts_(opts), ctx_(std::move(ctx)), ef_(ctx_.num_params, opts.error_feedback) {}

std::unique_ptr<BucketReduction> LossyCodec::start(float* grads, ElemSpan span) {
  if (steps_ <= opts_.warmup_steps) return allreduce_f32(ctx_, grads, span);
  ef_.add_to(grads, span);
  return compress(grads, span);
}

void LossyCodec::set_gradient_scale(float scale) {
  if (scale == scale_ || !(scale > 0)) return;
  ef_.scale(scale / scale_);
  scale_ = scale;
}

SyncState LossyCodec::checkpoint_state() {
  SyncState s;
  if (Tensor* r = ef_.residual_tensor()) s.tensors.push_back({"sync.residual", r, true});
  s.counters = {{"codec_steps", steps_}, {"codec_scale", scale_}};
  return s;
}

void LossyCodec::restore_counters(const nlohmann::json& j) {
  if (!j.is_object()) return;
  steps_ = j.value("codec_steps", steps_);
  scale_ = j.value("codec_scale", scale_);
}

std::string LossyCodec::schedule_note() const {
  std::string s = opts_.warmup_steps > 0 ? fmt::format(" after {} uncompressed step(s)", opts_.warmup_steps) : "";
  return s + (ef_.enabled() ? ", with error feedback" : ", without error feedback");
}

}  // namespace meshtrain::parallel
