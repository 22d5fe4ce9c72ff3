// A deliberately tiny third model family, written only against the Model
// interface (nn/model.h), to prove the engine above nn/ knows no family:
// token -> embedding E (V, C) -> tanh(W1 x + b1) (H) -> logits W2 h + b2 (V),
// softmax cross-entropy per position (no mixing across positions).
// Three parameter units: 0 = embedding, 1 = hidden layer, 2 = output layer;
// forward uses them in order, backward in reverse; no bracketed unit.
// fp32 only: a mixed precision is refused.
#pragma once
#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "meshtrain/core/error.h"
#include "meshtrain/core/rng.h"
#include "meshtrain/nn/model.h"

namespace tiny_mlp {

using namespace meshtrain;

struct MlpShape {
  int vocab = 37, embd = 8, hidden = 16, seq = 5;
};

class MlpSpec final : public ModelSpec, public std::enable_shared_from_this<MlpSpec> {
 public:
  explicit MlpSpec(MlpShape s) : s_(s) {
    const int64_t V = s.vocab, C = s.embd, H = s.hidden;
    int64_t at = 0;
    auto add = [&](const char* name, Shape shape, int unit) {
      ParamInfo p{name, shape, at, unit, shape.size() >= 2, shape.size() >= 2};
      at = p.end();
      layout_.params.push_back(p);
    };
    add("embed.weight", {V, C}, 0);
    layout_.units.push_back({"embedding", 0, at});
    int64_t b = at;
    add("hidden.weight", {H, C}, 1);
    add("hidden.bias", {H}, 1);
    layout_.units.push_back({"hidden", b, at});
    b = at;
    add("out.weight", {V, H}, 2);
    add("out.bias", {V}, 2);
    layout_.units.push_back({"output", b, at});
    layout_.numel = at;
    for (int u = 0; u < 3; ++u) layout_.order.push_back({true, u, false}), layout_.order.push_back({false, u, false});
    for (int u = 2; u >= 0; --u) layout_.order.push_back({true, u, true}), layout_.order.push_back({false, u, true});
    layout_.validate();
  }
  const MlpShape& shape() const { return s_; }
  std::string family() const override { return "tiny-mlp"; }
  nlohmann::json to_json() const override {
    return {{"family", family()}, {"vocab", s_.vocab}, {"embd", s_.embd}, {"hidden", s_.hidden},
            {"seq", s_.seq}};
  }
  std::string describe() const override { return "tiny MLP"; }
  const ParamLayout& layout() const override { return layout_; }
  int seq_len() const override { return s_.seq; }
  int vocab_size() const override { return s_.vocab; }
  double flops_per_token(int) const override { return 6.0 * static_cast<double>(layout_.numel); }
  ModelMemory memory(int B, int T, int, const Recompute&, Precision) const override {
    return {4 * static_cast<int64_t>(B) * T * (s_.embd + s_.hidden + s_.vocab), 0};
  }
  std::unique_ptr<Model> build(ModelBuffers buffers = {}) const override;

 private:
  MlpShape s_;
  ParamLayout layout_;
};

class Mlp final : public Model {
 public:
  Mlp(std::shared_ptr<const MlpSpec> spec, ModelBuffers b) : spec_(std::move(spec)) {
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
    for (int64_t i = 0; i < params_.numel(); ++i) p[i] = 0.3f * rng.normal();
  }
  float forward(const MicroBatch& b) override {
    const MlpShape& s = spec_->shape();
    const int64_t C = s.embd, H = s.hidden, V = s.vocab, N = static_cast<int64_t>(b.B) * b.T;
    MT_CHECK(b.T >= 1 && b.T <= s.seq, "tiny MLP: sequence length {} outside [1, {}]", b.T, s.seq);
    tokens_.assign(b.inputs, b.inputs + N);
    have_targets_ = b.targets != nullptr;
    if (have_targets_) targets_.assign(b.targets, b.targets + N);
    acts_ = Tensor::zeros({N * (C + H + V)}, DType::F32, MemCategory::Activations);
    x_ = acts_.data<float>(), h_ = x_ + N * C, z_ = h_ + N * H, n_ = N;
    hook(ParamEvent::Need, 0, false);
    for (int64_t i = 0; i < N; ++i)
      for (int64_t c = 0; c < C; ++c) x_[i * C + c] = p(0)[tokens_[i] * C + c];
    hook(ParamEvent::Done, 0, false);
    hook(ParamEvent::Need, 1, false);
    for (int64_t i = 0; i < N; ++i)
      for (int64_t j = 0; j < H; ++j) {
        double a = p(2)[j];
        for (int64_t c = 0; c < C; ++c) a += p(1)[j * C + c] * x_[i * C + c];
        h_[i * H + j] = static_cast<float>(std::tanh(a));
      }
    hook(ParamEvent::Done, 1, false);
    hook(ParamEvent::Need, 2, false);
    for (int64_t i = 0; i < N; ++i)
      for (int64_t v = 0; v < V; ++v) {
        double a = p(4)[v];
        for (int64_t j = 0; j < H; ++j) a += p(3)[v * H + j] * h_[i * H + j];
        z_[i * V + v] = static_cast<float>(a);
      }
    hook(ParamEvent::Done, 2, false);
    if (!have_targets_) return std::numeric_limits<float>::quiet_NaN();
    double sum = 0;
    counted_ = 0;
    for (int64_t i = 0; i < N; ++i) {
      if (targets_[i] < 0) continue;
      const float* z = z_ + i * V;
      double mx = z[0], se = 0;
      for (int64_t v = 1; v < V; ++v) mx = std::max<double>(mx, z[v]);
      for (int64_t v = 0; v < V; ++v) se += std::exp(z[v] - mx);
      sum += mx + std::log(se) - z[targets_[i]];
      ++counted_;
    }
    return static_cast<float>(sum / counted_);
  }
  void backward(float loss_scale) override {
    MT_CHECK(have_targets_, "tiny MLP: backward without a forward with targets");
    const MlpShape& s = spec_->shape();
    const int64_t C = s.embd, H = s.hidden, V = s.vocab, N = n_;
    const ParamLayout& lay = spec_->layout();
    std::vector<double> dz(V), dh(H), da(H);
    std::vector<float> dx(N * C, 0.f), dhs(N * H, 0.f);
    hook(ParamEvent::Need, 2, true);
    for (int64_t i = 0; i < N; ++i) {
      if (targets_[i] < 0) continue;
      const float* z = z_ + i * V;
      double mx = z[0], se = 0;
      for (int64_t v = 1; v < V; ++v) mx = std::max<double>(mx, z[v]);
      for (int64_t v = 0; v < V; ++v) se += std::exp(z[v] - mx);
      for (int64_t v = 0; v < V; ++v)
        dz[v] = (std::exp(z[v] - mx) / se - (v == targets_[i])) * loss_scale / counted_;
      for (int64_t v = 0; v < V; ++v) {
        g(4)[v] += static_cast<float>(dz[v]);
        for (int64_t j = 0; j < H; ++j) {
          g(3)[v * H + j] += static_cast<float>(dz[v] * h_[i * H + j]);
          dhs[i * H + j] += static_cast<float>(dz[v] * p(3)[v * H + j]);
        }
      }
    }
    hook(ParamEvent::Done, 2, true);
    ready(lay.units[2]);
    hook(ParamEvent::Need, 1, true);
    for (int64_t i = 0; i < N; ++i)
      for (int64_t j = 0; j < H; ++j) {
        const float hv = h_[i * H + j];
        const double d = dhs[i * H + j] * (1.0 - hv * hv);
        g(2)[j] += static_cast<float>(d);
        for (int64_t c = 0; c < C; ++c) {
          g(1)[j * C + c] += static_cast<float>(d * x_[i * C + c]);
          dx[i * C + c] += static_cast<float>(d * p(1)[j * C + c]);
        }
      }
    hook(ParamEvent::Done, 1, true);
    ready(lay.units[1]);
    hook(ParamEvent::Need, 0, true);  // the lookup's backward reads no parameters
    for (int64_t i = 0; i < N; ++i)
      for (int64_t c = 0; c < C; ++c) g(0)[tokens_[i] * C + c] += dx[i * C + c];
    hook(ParamEvent::Done, 0, true);
    ready(lay.units[0]);
  }
  void zero_grad() override { grads_.zero_(); }
  const float* logits() const override { return z_; }
  int logits_stride() const override { return spec_->shape().vocab; }
  void set_grad_ready_hook(GradReadyHook h) override { ready_ = std::move(h); }
  void set_param_hook(ParamHook h) override { param_hook_ = std::move(h); }
  void set_recompute(const Recompute& r) override {
    MT_CHECK(r.mode == Recompute::Mode::None, "tiny MLP keeps every activation");
  }
  const Recompute& recompute() const override { return recompute_; }
  void set_precision(Precision p) override {
    MT_CHECK(p == Precision::FP32, "tiny MLP computes in fp32 only");
  }
  Precision precision() const override { return Precision::FP32; }
  void use_external_half_copy(Tensor) override { fail("tiny MLP computes in fp32 only"); }
  bool external_half_copy() const override { return false; }

 private:
  float* p(int k) const { return params_.data<float>() + spec_->layout().params[k].begin; }
  float* g(int k) const { return grads_.data<float>() + spec_->layout().params[k].begin; }
  void hook(ParamEvent e, int unit, bool bwd) {
    if (param_hook_) param_hook_(e, unit, bwd);
  }
  void ready(const ParamUnit& u) {
    if (ready_) ready_(u.begin, u.end);
  }
  std::shared_ptr<const MlpSpec> spec_;
  Tensor params_, grads_, acts_;
  float *x_ = nullptr, *h_ = nullptr, *z_ = nullptr;
  int64_t n_ = 0, counted_ = 0;
  std::vector<int32_t> tokens_, targets_;
  bool have_targets_ = false;
  Recompute recompute_;
  GradReadyHook ready_;
  ParamHook param_hook_;
};

inline std::unique_ptr<Model> MlpSpec::build(ModelBuffers buffers) const {
  return std::make_unique<Mlp>(std::static_pointer_cast<const MlpSpec>(shared_from_this()),
                               std::move(buffers));
}

inline std::shared_ptr<const MlpSpec> make_mlp(MlpShape s = {}) { return std::make_shared<MlpSpec>(s); }

}  // namespace tiny_mlp
