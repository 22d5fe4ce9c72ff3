// ResNet's ModelSpec (nn/model.h): dense image samples (C x H x W f32) with
// one class label each, the parameter layout of resnet_plan.h (batch norm's
// running statistics as model state, ParamInfo::trained = false), FLOPs per
// image, activation memory, and build().
#pragma once
#include <memory>

#include "meshtrain/nn/resnet_plan.h"

namespace meshtrain {

class ResNetSpec final : public ModelSpec, public std::enable_shared_from_this<ResNetSpec> {
 public:
  static constexpr const char* kFamily = "resnet";
  static std::shared_ptr<const ResNetSpec> make(const ResNetConfig& cfg);
  // The config from a description written by to_json(); throws naming `where`.
  static ResNetConfig config_from_json(const nlohmann::json& j, const std::string& where);

  const ResNetConfig& config() const { return cfg_; }
  const ResNetPlan& plan() const { return plan_; }
  std::string family() const override { return kFamily; }
  nlohmann::json to_json() const override;
  std::string describe() const override;
  const ParamLayout& layout() const override { return plan_.layout; }
  Input input() const override { return Input::Dense; }
  bool uses_replica_group() const override { return true; }  // synchronized batch norm
  Shape sample_shape() const override {
    return {cfg_.in_channels, cfg_.image_size, cfg_.image_size};
  }
  int seq_len() const override { return 1; }
  int vocab_size() const override { return cfg_.num_classes; }
  double flops_per_token(int) const override { return flops_per_image_; }
  ModelMemory memory(int B, int T, int nthreads, const Recompute& recompute,
                     Precision precision) const override;
  std::unique_ptr<Model> build(ModelBuffers buffers = {}) const override;
  // He (fan-out) normal convolutions, batch norm 1 and 0 with running
  // statistics 0 and 1, the classifier uniform(+-1/sqrt(features)) as
  // torchvision; a pure function of (seed, element).
  bool initial_weights(uint64_t seed, ElemSpan range, float* buffer) const override;

  explicit ResNetSpec(const ResNetConfig& cfg);  // use make()

 private:
  ResNetConfig cfg_;
  ResNetPlan plan_;
  double flops_per_image_ = 0;
};

}  // namespace meshtrain
