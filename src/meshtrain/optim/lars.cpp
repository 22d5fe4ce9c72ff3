#include "meshtrain/optim/lars.h"

#include <cmath>

#include "meshtrain/kernels/kernel_table.h"
#include "meshtrain/optim/sgd.h"

namespace meshtrain {

Lars::Lars(int64_t begin, int64_t end, std::vector<ParamSegment> segments,
           const OptimizerConfig& cfg, Device device)
    : Optimizer(begin, end, std::move(segments), device), cfg_(cfg) {
  buf_ = new_state();
  for (const ParamSegment& s : this->segments())
    if (s.trained && s.decay) adapted_.push_back(s);
}

nlohmann::json Lars::hyperparameters() const {
  return {{"momentum", cfg_.momentum}, {"nesterov", cfg_.nesterov},
          {"weight_decay", cfg_.weight_decay}, {"trust_coefficient", cfg_.trust_coefficient},
          {"eps", cfg_.eps}};
}

void Lars::step(float* params, const float* grads, float lr, float grad_scale) {
  ++t_;
  const KernelTable& k = kernels_for(device());
  const Stream stream = default_stream(device());
  // ||w||^2 and ||g||^2 of every adapted layer, whole.
  const std::vector<double> sq = tensor_sums(adapted_, 2, [&](const ParamSegment& p, double* out) {
    out[0] += k.sum_squares(stream, params + p.begin, p.end - p.begin);
    out[1] += k.sum_squares(stream, grads + p.begin, p.end - p.begin);
  });
  trust_.assign(sq.size() / 2, 1.0);
  const double wd = cfg_.weight_decay, gs = grad_scale;
  for (size_t t = 0; t < trust_.size(); ++t) {
    const double wn = std::sqrt(sq[2 * t]), gn = std::sqrt(sq[2 * t + 1]) * std::abs(gs);
    if (wn > 0 && gn > 0) trust_[t] = cfg_.trust_coefficient * wn / (gn + wd * wn + cfg_.eps);
  }
  SgdHyper h = sgd_hyper(cfg_, lr, grad_scale, t_);
  float* buf = buf_.data<float>();
  for (const ParamSegment& s : segments()) {
    if (!s.trained) continue;
    h.weight_decay = s.decay ? cfg_.weight_decay : 0.0f;
    h.trust = s.decay ? static_cast<float>(trust_[static_cast<size_t>(s.tensor)]) : 1.0f;
    k.sgd_step(stream, params + s.begin, grads + s.begin, buf + offset(s), s.end - s.begin, h);
  }
}

}  // namespace meshtrain
