#include "meshtrain/optim/adamw.h"

#include "meshtrain/kernels/kernel_table.h"

namespace meshtrain {

AdamW::AdamW(int64_t begin, int64_t end, std::vector<ParamSegment> segments, AdamWConfig cfg,
             Device device)
    : Optimizer(begin, end, std::move(segments), device), cfg_(cfg) {
  m_ = new_state();
  v_ = new_state();
}

std::vector<OptimizerState> AdamW::state() { return {{"exp_avg", &m_}, {"exp_avg_sq", &v_}}; }

nlohmann::json AdamW::hyperparameters() const {
  return {{"beta1", cfg_.beta1}, {"beta2", cfg_.beta2}, {"eps", cfg_.eps},
          {"weight_decay", cfg_.weight_decay}};
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
  const KernelTable& k = kernels_for(device());
  for (const auto& s : segments()) {
    if (!s.trained) continue;
    h.weight_decay = s.decay ? cfg_.weight_decay : 0.0f;
    const int64_t o = offset(s);
    // The step runs where the optimizer state lives (kernels/kernel_table.h).
    k.adamw_step(default_stream(device()), params + s.begin, grads + s.begin, m + o, v + o,
                 s.end - s.begin, h);
  }
}

}  // namespace meshtrain
