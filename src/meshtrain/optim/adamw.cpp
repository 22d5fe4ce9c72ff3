#include "meshtrain/optim/adamw.h"

#include <algorithm>

#include "meshtrain/kernels/kernel_table.h"

namespace meshtrain {

AdamW::AdamW(int64_t begin, int64_t end, std::vector<ParamSegment> segments, AdamWConfig cfg,
             Device device)
    : begin_(begin), end_(end), cfg_(cfg) {
  MT_CHECK(begin >= 0 && end >= begin, "bad optimizer range [{}, {})", begin, end);
  for (auto s : segments) {
    s.begin = std::max(s.begin, begin);
    s.end = std::min(s.end, end);
    if (s.end > s.begin) segments_.push_back(s);
  }
  int64_t covered = 0;
  for (auto& s : segments_) covered += s.end - s.begin;
  MT_CHECK(covered == end - begin, "parameter segments cover {} of the {} optimizer elements",
           covered, end - begin);
  m_ = Tensor::zeros({end - begin}, DType::F32, MemCategory::OptimizerState, device);
  v_ = Tensor::zeros({end - begin}, DType::F32, MemCategory::OptimizerState, device);
}

void AdamW::step(float* params, const float* grads, float lr, float grad_scale) {
  ++t_;
  AdamWHyper h;
  h.lr = lr;
  h.beta1 = cfg_.beta1;
  h.beta2 = cfg_.beta2;
  h.eps = cfg_.eps;
  h.grad_scale = grad_scale;
  h.step = t_;
  float* m = m_.data<float>();
  float* v = v_.data<float>();
  for (const auto& s : segments_) {
    if (!s.trained) continue;
    h.weight_decay = s.decay ? cfg_.weight_decay : 0.0f;
    const int64_t o = s.begin - begin_;
    // The step runs where the optimizer state lives (kernels/kernel_table.h).
    kernels_for(m_.device()).adamw_step(default_stream(m_.device()), params + s.begin,
                                        grads + s.begin, m + o, v + o, s.end - s.begin, h);
  }
}

}  // namespace meshtrain
