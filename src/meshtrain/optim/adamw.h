// AdamW over a range of a flat parameter buffer (optim/optimizer.h); the
// segments say which parameters get weight decay.
#pragma once
#include <cstdint>
#include <vector>

#include "meshtrain/optim/optimizer.h"

namespace meshtrain {

struct AdamWConfig {
  float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.1f;
};

class AdamW final : public Optimizer {
 public:
  // Optimizer state (m, v) for elements [begin, end) of the flat buffers,
  // on `device`, that of the parameters it updates; the step runs there
  // (kernels/kernel_table.h).
  AdamW(int64_t begin, int64_t end, std::vector<ParamSegment> segments, AdamWConfig cfg,
        Device device = Device::cpu());

  std::string type() const override { return "adamw"; }
  void step(float* params, const float* grads, float lr, float grad_scale = 1.0f) override;
  std::vector<OptimizerState> state() override;
  nlohmann::json hyperparameters() const override;

  Tensor& exp_avg() { return m_; }
  Tensor& exp_avg_sq() { return v_; }
  const AdamWConfig& config() const { return cfg_; }

 private:
  AdamWConfig cfg_;
  Tensor m_, v_;
};

}  // namespace meshtrain
