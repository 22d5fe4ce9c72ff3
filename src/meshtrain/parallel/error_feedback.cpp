#include "meshtrain/parallel/error_feedback.h"

namespace meshtrain::parallel {

ErrorFeedback::ErrorFeedback(int64_t num_params, bool enabled) : enabled_(enabled) {
  if (enabled_) residual_ = Tensor::zeros({num_params}, DType::F32, MemCategory::CommBuffers);
}

void ErrorFeedback::add_to(float* grads, ElemSpan span) const {
  if (!enabled_) return;
  const float* e = residual_.data<float>();
  for (int64_t i = span.begin; i < span.end; ++i) grads[i] += e[i];
}

void ErrorFeedback::scale(float factor) {
  if (!enabled_) return;
  float* e = residual_.data<float>();
  for (int64_t i = 0; i < residual_.numel(); ++i) e[i] *= factor;
}

void ErrorFeedback::clear() {
  if (enabled_) residual_.zero_();
}

}  // namespace meshtrain::parallel
