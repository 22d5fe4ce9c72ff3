#include "meshtrain/optim/lamb.h"

#include <algorithm>
#include <cmath>

#include "meshtrain/kernels/kernel_table.h"

namespace meshtrain {

Lamb::Lamb(int64_t begin, int64_t end, std::vector<ParamSegment> segments,
           const OptimizerConfig& cfg, Device device)
    : Optimizer(begin, end, std::move(segments), device), cfg_(cfg) {
  m_ = new_state();
  v_ = new_state();
  for (const ParamSegment& s : this->segments())
    if (s.trained && s.decay) adapted_.push_back(s);
}

nlohmann::json Lamb::hyperparameters() const {
  return {{"beta1", cfg_.beta1}, {"beta2", cfg_.beta2}, {"eps", cfg_.eps},
          {"weight_decay", cfg_.weight_decay}, {"trust_clip", cfg_.trust_clip}};
}

void Lamb::step(float* params, const float* grads, float lr, float grad_scale) {
  ++t_;
  const KernelTable& k = kernels_for(device());
  const Stream stream = default_stream(device());
  LambHyper h;
  h.beta1 = cfg_.beta1;
  h.beta2 = cfg_.beta2;
  h.eps = cfg_.eps;
  h.grad_scale = grad_scale;
  h.step = t_;
  float* m = m_.data<float>();
  float* v = v_.data<float>();
  // Pass 1: the moments, and ||w||^2 and ||u||^2 of every adapted layer.
  h.weight_decay = cfg_.weight_decay;
  const std::vector<double> sq = tensor_sums(adapted_, 2, [&](const ParamSegment& p, double* out) {
    const int64_t n = p.end - p.begin, o = offset(p);
    out[0] += k.sum_squares(stream, params + p.begin, n);
    out[1] += k.lamb_moments(stream, grads + p.begin, m + o, v + o, params + p.begin, n, h);
  });
  h.weight_decay = 0.0f;
  for (const ParamSegment& s : segments())
    if (s.trained && !s.decay)
      k.lamb_moments(stream, grads + s.begin, m + offset(s), v + offset(s), params + s.begin,
                     s.end - s.begin, h);
  trust_.assign(sq.size() / 2, 1.0);
  for (size_t t = 0; t < trust_.size(); ++t) {
    const double wn = std::sqrt(sq[2 * t]), un = std::sqrt(sq[2 * t + 1]);
    if (wn > 0 && un > 0) trust_[t] = wn / un;
    if (cfg_.trust_clip > 0) trust_[t] = std::min(trust_[t], static_cast<double>(cfg_.trust_clip));
  }
  // Pass 2: the update, u recomputed from the same m, v, w.
  for (const ParamSegment& s : segments()) {
    if (!s.trained) continue;
    h.weight_decay = s.decay ? cfg_.weight_decay : 0.0f;
    const double ratio = s.decay ? trust_[static_cast<size_t>(s.tensor)] : 1.0;
    k.lamb_apply(stream, params + s.begin, m + offset(s), v + offset(s), s.end - s.begin, h,
                 static_cast<float>(lr * ratio));
  }
}

}  // namespace meshtrain
