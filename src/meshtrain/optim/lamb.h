// LAMB (You et al. 2020): Adam's bias-corrected moments, the update
//   u = mhat / (sqrt(vhat) + eps) + weight_decay * w
// scaled per layer by the trust ratio min(||w|| / ||u||, trust_clip) (1 when
// either norm is 0), w -= lr * ratio * u. Layers excluded from adaptation
// (norms and biases by default: ParamSegment::decay) take the Adam update
// without weight decay and ratio 1. The norms are the whole layer's across
// ZeRO shards and tensor-parallel ranks (optim/tensor_norms.h).
#pragma once
#include "meshtrain/optim/optimizer.h"

namespace meshtrain {

class Lamb final : public Optimizer {
 public:
  // segments: one per tensor (tensor_segments).
  Lamb(int64_t begin, int64_t end, std::vector<ParamSegment> segments, const OptimizerConfig& cfg,
       Device device = Device::cpu());

  std::string type() const override { return "lamb"; }
  bool per_layer() const override { return true; }
  void step(float* params, const float* grads, float lr, float grad_scale = 1.0f) override;
  std::vector<OptimizerState> state() override { return {{"exp_avg", &m_}, {"exp_avg_sq", &v_}}; }
  nlohmann::json hyperparameters() const override;
  const std::vector<double>& trust_ratios() const { return trust_; }

 private:
  OptimizerConfig cfg_;
  Tensor m_, v_;
  std::vector<ParamSegment> adapted_;
  std::vector<double> trust_;
};

}  // namespace meshtrain
