// The plumbing every family's Model implementation shares (GPT and Llama
// today): the kernel table of the buffers' device, the gradient-ready and
// parameter hooks, the recompute policy, mixed precision's 16-bit copy
// (HalfWeights), the tensor-parallel group and the frozen-under-adapters
// state, with the Model overrides that only set or forward to them. A family
// derives from it, owns its buffers, spec and activations, and implements
// release_activations(): the recompute and precision setters call it, since
// the activation layout depends on both.
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "meshtrain/core/device_runtime.h"
#include "meshtrain/kernels/kernel_table.h"
#include "meshtrain/nn/half_weights.h"
#include "meshtrain/nn/model.h"

namespace meshtrain {

class ModelBase : public Model {
 public:
  void set_grad_ready_hook(GradReadyHook hook) override { grad_ready_hook_ = std::move(hook); }
  void set_param_hook(ParamHook hook) override { param_hook_ = std::move(hook); }
  // Takes effect at the next forward; a forward done under another policy
  // (or precision) needs a new forward before backward.
  void set_recompute(const Recompute& recompute) override;
  const Recompute& recompute() const override { return recompute_; }
  void set_precision(Precision p) override;
  Precision precision() const override { return half_.precision(); }
  void use_external_half_copy(Tensor buffer) override;
  bool external_half_copy() const override { return half_.external(); }
  // Checks that the group's rank and size are this shard's.
  void set_tensor_parallel_group(std::shared_ptr<TensorParallelGroup> group) override;
  void zero_grad() override;
  int64_t release_f32_matrices() override;
  bool f32_matrices_released() const override { return half_.released(); }
  void hold_parameters(bool held) override { half_.hold(held); }
  void set_activation_slots(int n) override;
  void select_slot(int slot) override;
  int activation_slots() const override { return slots_; }
  void widen_released_matrices(float* dst) const override;
  // The split backward (Model::backward_stage_input): the family's backward
  // with its weight GEMMs and grad-ready reports queued, then run.
  void backward_stage_input(const float* output_grad, float loss_scale) override;
  void backward_stage_weights() override;
  // Every family frees its activations here: set_recompute and set_precision
  // call it, because the activation layout depends on both.
  void release_activations() override = 0;

 protected:
  // Inside backward_stage_input a GradBegin/GradEnd bracket is queued with
  // the weight products: the bracketed gradient is written in the weight part.
  void use_params(ParamEvent ev, int unit, bool backward) {
    if (deferring_ && (ev == ParamEvent::GradBegin || ev == ParamEvent::GradEnd)) return defer_event(ev, unit);
    if (param_hook_) param_hook_(ev, unit, backward);
  }
  void defer_event(ParamEvent ev, int unit);
  // [begin, end) of the gradient buffer has its last contribution: reported
  // now, or, inside backward_stage_input, after the weight GEMMs queued before it.
  void report_ready(int64_t begin, int64_t end);
  // Inside backward_stage_input: queues dw += dout^T inp (N rows; dout
  // N x OC, inp N x C) with copies of its operands and returns true (the
  // caller then skips the product); false otherwise, or for a null dw.
  // Under mixed precision the copies are 16-bit (dout_h, or dout rounded;
  // inp_h, or inp rounded) for matmul_backward_weight_half; in f32 they feed
  // matmul_backward's weight product: the floats the undivided backward writes.
  bool defer_weight_grad(float* dw, const float* dout, const uint16_t* dout_h, const float* inp,
                         const uint16_t* inp_h, int64_t N, int64_t C, int64_t OC);
  // Inside backward_stage_input: weight GEMMs are queued.
  bool deferring() const { return deferring_; }
  // Frees every slot's queued operands (the families' release_activations).
  void release_deferred() { deferred_.clear(); }

  // A family's per-micro-batch state of one activation slot: its
  // activations and what its backward reads from its forward.
  template <class Acts>
  struct SlotState {
    std::unique_ptr<Acts> acts;
    int B = 0, T = 0, scratch_block = -1;
    float mean_loss = 0.f;
    int64_t counted = 0;
    bool have_targets = false;
  };
  // Parks the selected slot's state (from) and takes slot `to`'s; the
  // staged ids are switched by ModelBase.
  virtual void switch_slot(int from, int to) = 0;
  int slot_ = 0, slots_ = 1;  // the selected activation slot, and how many there are

  const KernelTable* k_ = nullptr;  // the ops of the device the buffers live on
  Stream stream_;                   // where the model's ops are queued
  std::vector<float> host_scratch_;  // device values read back (sum_floats)
  // Per slot: the staged token ids (which = 0) and targets (1), a host copy
  // on the CPU, a device buffer elsewhere.
  struct StagedIds {
    std::vector<int32_t> host[2];
    Tensor device[2];
  };
  std::vector<StagedIds> ids_ = std::vector<StagedIds>(1);
  // The sum, in index order in double, of n floats of the model's device
  // memory (the per-position losses): read back to the host first when the
  // model is on another device.
  double sum_floats(const float* p, int64_t n) {
    const float* h = p;
    if (!k_->device.is_cpu()) {
      host_scratch_.resize(static_cast<size_t>(n));
      runtime_for(k_->device).copy(host_scratch_.data(), Device::cpu(), p, k_->device,
                                   sizeof(float) * static_cast<size_t>(n), stream_);
      h = host_scratch_.data();
    }
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) sum += h[i];
    return sum;
  }
  // The micro-batch's token ids (which = 0) or targets (1) copied where the
  // kernels read them, the model's device, and kept for backward: a plain
  // host copy on the CPU (not counted, as before), a device buffer elsewhere.
  const int32_t* stage_ids(int which, const int32_t* src, int64_t n) {
    StagedIds& ids = ids_[static_cast<size_t>(slot_)];
    if (k_->device.is_cpu()) {
      ids.host[which].assign(src, src + n);
      return ids.host[which].data();
    }
    Tensor& t = ids.device[which];
    if (!t.defined() || t.numel() < n) t = Tensor::zeros({n}, DType::I32, MemCategory::Data, k_->device);
    runtime_for(k_->device).copy(t.raw(), k_->device, src, Device::cpu(),
                                 sizeof(int32_t) * static_cast<size_t>(n), stream_);
    return t.data<int32_t>();
  }
  const int32_t* staged_ids(int which) const {
    const StagedIds& ids = ids_[static_cast<size_t>(slot_)];
    return k_->device.is_cpu() ? ids.host[which].data() : ids.device[which].data<int32_t>();
  }
  // Writes all of `params` (f32, on the model's device) from the host:
  // `fill` writes its values into a host array, the buffer itself on the
  // CPU, a staging copy elsewhere that is then copied over.
  void fill_params_from_host(const Tensor& params, const std::function<void(float*)>& fill) const;
  // Causal attention on packed qkv (B_ x T_ rows of 3A) in the model's
  // precision: under mixed precision its products may take 16-bit operands
  // (KernelTable::attention_*_half; the CPU's stay f32).
  void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int64_t A,
                         int64_t NH, float* workspace, int nthreads) const {
    if (half_.mixed())
      k_->attention_forward_half(stream_, half_.format(), out, lse, qkv, B, T, A, NH, workspace,
                                 nthreads);
    else
      k_->attention_forward(stream_, out, lse, qkv, B, T, A, NH, workspace, nthreads);
  }
  void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                          const float* lse, int B, int T, int64_t A, int64_t NH, float* workspace,
                          int nthreads) const {
    if (half_.mixed())
      k_->attention_backward_half(stream_, half_.format(), dqkv, dout, qkv, out, lse, B, T, A, NH,
                                  workspace, nthreads);
    else
      k_->attention_backward(stream_, dqkv, dout, qkv, out, lse, B, T, A, NH, workspace, nthreads);
  }
  // Zeroes n floats of the model's device memory, in stream order.
  void zero_floats(float* p, int64_t n) const {
    runtime_for(k_->device).fill_zero(p, sizeof(float) * static_cast<size_t>(n), stream_);
  }
  Recompute recompute_;
  // Before the derived class's buffers, so it settles its account (released
  // f32 bytes) after they are freed.
  HalfWeights half_;
  std::shared_ptr<TensorParallelGroup> tp_;
  // Frozen under LoRA adapters (Model::freeze): no parameter gradients.
  bool frozen_ = false;
  std::shared_ptr<LinearAdapters> adapters_;
  GradReadyHook grad_ready_hook_;
  ParamHook param_hook_;
  // Per activation slot: the queued weight GEMMs (operand copies kept for
  // reuse by the next micro-batch in the slot) and grad-ready reports.
  struct DeferredOp {
    float* dw = nullptr;  // null: a grad-ready report of [begin, end), or a parameter event
    int64_t N = 0, C = 0, OC = 0, begin = 0, end = 0;
    Tensor dout, inp;
    bool is_event = false;  // a backward ParamEvent `event` of `unit` (dw null)
    ParamEvent event = ParamEvent::GradBegin;
    int unit = 0;
  };
  struct DeferredQueue {
    std::vector<DeferredOp> ops;
    size_t used = 0;
  };
  std::vector<DeferredQueue> deferred_;
  bool deferring_ = false;
  DeferredOp& next_deferred();
  bool have_targets_ = false;  // the last forward had targets (backward may run)
};

}  // namespace meshtrain
