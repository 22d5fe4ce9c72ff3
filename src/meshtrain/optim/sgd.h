// SGD with momentum, PyTorch's torch.optim.SGD form (the buffer starts as
// the first gradient; Nesterov optional; weight decay added to the
// gradient, so coupled, as PyTorch's), over a range of the flat buffer.
#pragma once
#include "meshtrain/kernels/optimizer_hyper.h"
#include "meshtrain/optim/optimizer.h"

namespace meshtrain {

// Step `t` (1-based) of SGD with cfg's momentum; weight decay and trust are
// set per segment by the caller (Sgd, Lars).
SgdHyper sgd_hyper(const OptimizerConfig& cfg, float lr, float grad_scale, int64_t t);

class Sgd final : public Optimizer {
 public:
  Sgd(int64_t begin, int64_t end, std::vector<ParamSegment> segments, const OptimizerConfig& cfg,
      Device device = Device::cpu());

  std::string type() const override { return "sgd"; }
  void step(float* params, const float* grads, float lr, float grad_scale = 1.0f) override;
  std::vector<OptimizerState> state() override { return {{"momentum", &buf_}}; }
  nlohmann::json hyperparameters() const override;

 private:
  OptimizerConfig cfg_;
  Tensor buf_;
};

}  // namespace meshtrain
