// Error feedback for the lossy gradient codecs (gradient_codec.h): each rank
// keeps, per element of the flat buffer, what its codec did not send, and
// adds it to the next step's gradient before encoding. A codec with error
// feedback off keeps nothing (and sends a biased estimate).
#pragma once
#include <cstdint>

#include "meshtrain/core/elem_span.h"
#include "meshtrain/core/memory.h"
#include "meshtrain/core/tensor.h"

namespace meshtrain::parallel {

class ErrorFeedback {
 public:
  ErrorFeedback(int64_t num_params, bool enabled);
  bool enabled() const { return enabled_; }
  // grads[span] += residual[span]: the gradient the codec encodes this step.
  void add_to(float* grads, ElemSpan span) const;
  // Element i of the flat buffer's residual (null when disabled): the codec
  // writes M - (what it sent) there.
  float* residual() const { return enabled_ ? residual_.data<float>() : nullptr; }
  // The residual as a tensor (checkpoints); null when disabled.
  Tensor* residual_tensor() { return enabled_ ? &residual_ : nullptr; }
  int64_t bytes() const { return enabled_ ? static_cast<int64_t>(residual_.nbytes()) : 0; }
  // Multiplies the residual by `factor` (the gradients' scale changed).
  void scale(float factor);
  void clear();

 private:
  bool enabled_;
  Tensor residual_;
};

}  // namespace meshtrain::parallel
