// A LoRA model (nn/lora_spec.h) on the engine's buffers: the adapters are
// its flat parameters and gradients (what data parallelism, ZeRO, AdamW and
// checkpoints handle), and it holds the frozen base model beside them.
// forward/backward run the base, which is frozen under the adapters
// (Model::freeze): it writes no gradient of its own and calls the adapters
// around each adapted GEMM. The base's parameter events for blocks with
// adapters become this model's (its units), and a block's adapter
// gradients are reported ready when the block's backward is done.
//
// Precision: the adapters stay f32; under mixed precision their products
// with a layer input read the 16-bit input the base GEMM read (and a
// 16-bit copy of A), with f32 accumulation, like every other GEMM.
#pragma once
#include <memory>
#include <utility>
#include <vector>

#include "meshtrain/nn/lora_spec.h"
#include "meshtrain/nn/model.h"

namespace meshtrain {

class LoraAdapters;

class LoraModel final : public Model {
 public:
  LoraModel(std::shared_ptr<const LoraSpec> spec, ModelBuffers buffers);
  ~LoraModel() override;

  const ModelSpec& spec() const override { return *spec_; }
  const Tensor& param_buffer() const override { return params_; }
  const Tensor& grad_buffer() const override { return grads_; }
  // The base from `seed` (replaced by init_from when the run has one), A
  // uniform in +-1/sqrt(in) (PEFT's default), B zero: training starts from
  // the base's function exactly.
  void init_weights(uint64_t seed) override;
  float forward(const MicroBatch& batch) override { return base_->forward(batch); }
  void backward(float loss_scale) override { base_->backward(loss_scale); }
  // A pipeline stage: the base's stage passes, with the adapters' saved
  // products kept per activation slot. The split backward's input part
  // takes the adapters' gradients too (a frozen base queues no weight
  // product), so its weight part has nothing of theirs left to do.
  float forward_stage(const MicroBatch& batch, const float* input) override {
    return base_->forward_stage(batch, input);
  }
  void backward_stage(const float* output_grad, float loss_scale) override {
    base_->backward_stage(output_grad, loss_scale);
  }
  // The adapters' gradient-ready reports of the input part are held back
  // for the weight part, where the executor expects every gradient finished.
  void backward_stage_input(const float* output_grad, float loss_scale) override;
  void backward_stage_weights() override;
  const float* stage_output() const override { return base_->stage_output(); }
  const float* stage_input_grad() const override { return base_->stage_input_grad(); }
  int64_t stage_width() const override { return base_->stage_width(); }
  int64_t stage_floats(int B, int T) const override { return base_->stage_floats(B, T); }
  void set_activation_slots(int n) override;
  void select_slot(int slot) override;
  int activation_slots() const override { return base_->activation_slots(); }
  void zero_grad() override { grads_.zero_(); }
  const float* logits() const override { return base_->logits(); }
  int logits_stride() const override { return base_->logits_stride(); }
  void set_grad_ready_hook(GradReadyHook hook) override { grad_ready_ = std::move(hook); }
  void set_param_hook(ParamHook hook) override { param_hook_ = std::move(hook); }
  void set_recompute(const Recompute& recompute) override { base_->set_recompute(recompute); }
  const Recompute& recompute() const override { return base_->recompute(); }
  void set_precision(Precision p) override;
  Precision precision() const override { return base_->precision(); }
  // ZeRO's 16-bit copy of the (f32-read) adapters: held, never read.
  void use_external_half_copy(Tensor buffer) override { external_half_ = std::move(buffer); }
  bool external_half_copy() const override { return external_half_.defined(); }
  Model* frozen_base() override { return base_.get(); }
  Tensor merged_parameters(const Tensor& params) const override;
  // LoraConfig::base_precision bf16/fp16: the base's f32 matrices go (Model::release_f32_matrices).
  void weights_loaded() override;
  void release_activations() override;

 private:
  std::shared_ptr<const LoraSpec> spec_;
  Tensor params_, grads_, external_half_;
  std::unique_ptr<Model> base_;
  std::shared_ptr<LoraAdapters> adapters_;
  GradReadyHook grad_ready_;
  ParamHook param_hook_;
  // The selected activation slot, and per slot the ready reports an input
  // part held back (backward_stage_input); null: reports go out at once.
  size_t slot_ = 0;
  std::vector<std::vector<std::pair<int64_t, int64_t>>> held_ready_;
  std::vector<std::pair<int64_t, int64_t>>* holding_ = nullptr;
};

// A frozen base's parameters as f32 in a new tensor (a base held in 16 bits
// widened back from them): what merging the adapters starts from.
Tensor frozen_base_f32(const Model& base);

}  // namespace meshtrain
