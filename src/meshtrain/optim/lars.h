// LARS (You et al. 2017), as NVIDIA's LARC wraps SGD: each layer's gradient
// plus weight decay is scaled by its trust ratio
//   eta * ||w|| / (||g|| + weight_decay * ||w|| + eps)   (1 when ||w|| or ||g|| is 0)
// before SGD with momentum (optim/sgd.h). Layers excluded from adaptation
// (norms and biases by default: ParamSegment::decay) get neither the ratio
// nor weight decay. The norms are the whole layer's across ZeRO shards and
// tensor-parallel ranks (optim/tensor_norms.h).
#pragma once
#include "meshtrain/optim/optimizer.h"

namespace meshtrain {

class Lars final : public Optimizer {
 public:
  // segments: one per tensor (tensor_segments).
  Lars(int64_t begin, int64_t end, std::vector<ParamSegment> segments, const OptimizerConfig& cfg,
       Device device = Device::cpu());

  std::string type() const override { return "lars"; }
  bool per_layer() const override { return true; }
  void step(float* params, const float* grads, float lr, float grad_scale = 1.0f) override;
  std::vector<OptimizerState> state() override { return {{"momentum", &buf_}}; }
  nlohmann::json hyperparameters() const override;
  // The last step's trust ratio per layer (1 for excluded ones; tests, logs).
  const std::vector<double>& trust_ratios() const { return trust_; }

 private:
  OptimizerConfig cfg_;
  Tensor buf_;
  std::vector<ParamSegment> adapted_;  // this rank's layers with a trust ratio
  std::vector<double> trust_;
};

}  // namespace meshtrain
