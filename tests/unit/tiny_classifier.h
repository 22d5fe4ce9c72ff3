// A tiny model family whose samples are not tokens (ModelSpec::Input::Dense):
// a linear classifier logits = W x + b over D features per sample, into V
// classes, with softmax cross-entropy and top-1/top-k measures. Written only
// against nn/model.h, to prove the engine's evaluation needs no decoder; it
// records the mode each forward ran in. One parameter unit; f32 only.
#pragma once
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "meshtrain/core/error.h"
#include "meshtrain/core/rng.h"
#include "meshtrain/nn/model.h"

namespace tiny_classifier {

using namespace meshtrain;

class ClassifierSpec final : public ModelSpec, public std::enable_shared_from_this<ClassifierSpec> {
 public:
  ClassifierSpec(int features, int classes, int top_k) : D_(features), V_(classes), k_(top_k) {
    layout_.params.push_back({"fc.weight", {V_, D_}, 0, 0, true, false});
    layout_.params.push_back({"fc.bias", {V_}, int64_t{V_} * D_, 0, false, false});
    layout_.numel = int64_t{V_} * D_ + V_;
    layout_.units.push_back({"fc", 0, layout_.numel});
    layout_.order = {{true, 0, false}, {false, 0, false}, {true, 0, true}, {false, 0, true}};
    layout_.validate();
  }
  int features() const { return D_; }
  int top_k() const { return k_; }
  std::string family() const override { return "tiny-classifier"; }
  nlohmann::json to_json() const override { return {{"family", family()}, {"features", D_}, {"classes", V_}}; }
  std::string describe() const override { return "tiny classifier"; }
  const ParamLayout& layout() const override { return layout_; }
  Input input() const override { return Input::Dense; }
  Shape sample_shape() const override { return {D_}; }
  int seq_len() const override { return 1; }
  int vocab_size() const override { return V_; }
  double flops_per_token(int) const override { return 6.0 * static_cast<double>(layout_.numel); }
  ModelMemory memory(int B, int, int, const Recompute&, Precision) const override {
    return {4 * static_cast<int64_t>(B) * V_, 0};
  }
  std::unique_ptr<Model> build(ModelBuffers buffers = {}) const override;

 private:
  int64_t D_, V_;
  int k_;
  ParamLayout layout_;
};

class Classifier final : public Model {
 public:
  Classifier(std::shared_ptr<const ClassifierSpec> spec, ModelBuffers b) : spec_(std::move(spec)) {
    b = adopt_buffers(std::move(b), spec_->layout().numel);
    params_ = b.params;
    grads_ = b.grads;
  }
  const ModelSpec& spec() const override { return *spec_; }
  const Tensor& param_buffer() const override { return params_; }
  const Tensor& grad_buffer() const override { return grads_; }
  void init_weights(uint64_t seed) override {
    Rng rng(seed);
    float* p = params_.data<float>();
    for (int64_t i = 0; i < params_.numel(); ++i) p[i] = rng.normal();
  }
  float forward(const MicroBatch& b) override {
    MT_CHECK(b.features != nullptr && b.inputs == nullptr, "tiny classifier: dense samples only");
    const int64_t D = spec_->features(), V = spec_->vocab_size();
    modes_.push_back(training_);
    logits_.assign(static_cast<size_t>(b.B) * V, 0.f);
    const float* W = params_.data<float>();
    for (int64_t i = 0; i < b.B; ++i)
      for (int64_t v = 0; v < V; ++v) {
        double a = W[V * D + v];
        for (int64_t d = 0; d < D; ++d) a += W[v * D + d] * b.features[i * D + d];
        logits_[i * V + v] = static_cast<float>(a);
      }
    labels_.assign(b.targets, b.targets + (b.targets ? b.B : 0));
    if (!b.targets) return std::numeric_limits<float>::quiet_NaN();
    double sum = 0;
    for (int64_t i = 0; i < b.B; ++i) {
      const float* z = &logits_[i * V];
      const double mx = *std::max_element(z, z + V);
      double se = 0;
      for (int64_t v = 0; v < V; ++v) se += std::exp(z[v] - mx);
      sum += mx + std::log(se) - z[labels_[i]];
    }
    return static_cast<float>(sum / b.B);
  }
  // Correct when fewer than k classes score above the label's.
  std::vector<MetricSum> metrics() const override {
    const int64_t V = spec_->vocab_size(), B = static_cast<int64_t>(labels_.size());
    double top1 = 0, topk = 0;
    for (int64_t i = 0; i < B; ++i) {
      const float* z = &logits_[i * V];
      const int64_t above = std::count_if(z, z + V, [&](float x) { return x > z[labels_[i]]; });
      top1 += above < 1;
      topk += above < spec_->top_k();
    }
    return {{"top1", top1, static_cast<double>(B)},
            {"top" + std::to_string(spec_->top_k()), topk, static_cast<double>(B)}};
  }
  void set_training(bool training) override { training_ = training; }
  bool training() const override { return training_; }
  const std::vector<bool>& modes() const { return modes_; }
  void backward(float) override { fail("tiny classifier: evaluation only"); }
  void zero_grad() override { grads_.zero_(); }
  const float* logits() const override { return logits_.data(); }
  int logits_stride() const override { return spec_->vocab_size(); }
  void set_grad_ready_hook(GradReadyHook) override {}
  void set_param_hook(ParamHook) override {}
  void set_recompute(const Recompute& r) override { recompute_ = r; }
  const Recompute& recompute() const override { return recompute_; }
  void set_precision(Precision p) override { MT_CHECK(p == Precision::FP32, "tiny classifier: f32 only"); }
  Precision precision() const override { return Precision::FP32; }
  void use_external_half_copy(Tensor) override { fail("tiny classifier: f32 only"); }
  bool external_half_copy() const override { return false; }

 private:
  std::shared_ptr<const ClassifierSpec> spec_;
  Tensor params_, grads_;
  std::vector<float> logits_;
  std::vector<int32_t> labels_;
  std::vector<bool> modes_;
  bool training_ = true;
  Recompute recompute_;
};

inline std::unique_ptr<Model> ClassifierSpec::build(ModelBuffers buffers) const {
  return std::make_unique<Classifier>(shared_from_this(), std::move(buffers));
}

}  // namespace tiny_classifier
