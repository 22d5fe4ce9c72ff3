#include "meshtrain/optim/sgd.h"

#include "meshtrain/kernels/kernel_table.h"

namespace meshtrain {

Sgd::Sgd(int64_t begin, int64_t end, std::vector<ParamSegment> segments, const OptimizerConfig& cfg,
         Device device)
    : Optimizer(begin, end, std::move(segments), device), cfg_(cfg) {
  buf_ = new_state();
}

nlohmann::json Sgd::hyperparameters() const {
  return {{"momentum", cfg_.momentum}, {"nesterov", cfg_.nesterov},
          {"weight_decay", cfg_.weight_decay}};
}

SgdHyper sgd_hyper(const OptimizerConfig& cfg, float lr, float grad_scale, int64_t t) {
  SgdHyper h;
  h.lr = lr;
  h.momentum = cfg.momentum;
  h.nesterov = cfg.nesterov;
  h.grad_scale = grad_scale;
  h.first = t == 1;  // PyTorch: the buffer starts as the first step's gradient
  return h;
}

void Sgd::step(float* params, const float* grads, float lr, float grad_scale) {
  ++t_;
  SgdHyper h = sgd_hyper(cfg_, lr, grad_scale, t_);
  float* buf = buf_.data<float>();
  const KernelTable& k = kernels_for(device());
  for (const auto& s : segments()) {
    if (!s.trained) continue;
    h.weight_decay = s.decay ? cfg_.weight_decay : 0.0f;
    k.sgd_step(default_stream(device()), params + s.begin, grads + s.begin, buf + offset(s),
               s.end - s.begin, h);
  }
}

}  // namespace meshtrain
