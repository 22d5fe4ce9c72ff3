#include "meshtrain/nn/model_base.h"

#include "meshtrain/core/error.h"

namespace meshtrain {

void ModelBase::set_recompute(const Recompute& recompute) {
  check_recompute(recompute);
  if (recompute == recompute_) return;
  recompute_ = recompute;
  release_activations();  // the layout depends on the policy: drop it and the last forward
  have_targets_ = false;
}

void ModelBase::set_precision(Precision p) {
  if (!half_.set_precision(p, layout().numel, k_->device)) return;
  release_activations();  // the layout depends on the precision: drop it and the last forward
  have_targets_ = false;
}

void ModelBase::use_external_half_copy(Tensor buffer) {
  half_.use_external(std::move(buffer), layout().numel);
}

void ModelBase::set_tensor_parallel_group(std::shared_ptr<TensorParallelGroup> group) {
  const ModelShard shard = spec().shard();
  if (group)
    MT_CHECK(group->size() == shard.tp_size && group->rank() == shard.tp_rank,
             "tp group is rank {} of {}, the model shard is tp rank {} of {}", group->rank(),
             group->size(), shard.tp_rank, shard.tp_size);
  tp_ = std::move(group);
}

void ModelBase::fill_params_from_host(const Tensor& params,
                                      const std::function<void(float*)>& fill) const {
  if (params.device().is_cpu()) return fill(params.data<float>());
  Tensor host = Tensor::zeros({params.numel()}, DType::F32, MemCategory::Other);
  fill(host.data<float>());
  Tensor(params).copy_from(host);  // a handle on the same storage
}

void ModelBase::set_activation_slots(int n) {
  MT_CHECK(n >= 1, "activation slots must be >= 1 (got {})", n);
  select_slot(0);
  release_activations();  // every slot's
  slots_ = n;
  ids_.assign(static_cast<size_t>(n), StagedIds{});
}

void ModelBase::select_slot(int slot) {
  MT_CHECK(slot >= 0 && slot < slots_, "activation slot {} of {}", slot, slots_);
  if (slot == slot_) return;
  switch_slot(slot_, slot);
  slot_ = slot;
}

void ModelBase::zero_grad() {
  Tensor grads = grad_buffer();  // a view: the same storage
  if (grads.defined()) grads.zero_();
}

int64_t ModelBase::release_f32_matrices() {
  return half_.release_masters(layout(), param_buffer().data<float>(), *k_);
}

void ModelBase::widen_released_matrices(float* dst) const {
  half_.widen_released(layout(), dst, *k_);
}

namespace {
// A queue entry's operand buffer, kept from the last micro-batch when it fits.
void hold(Tensor& t, int64_t n, DType dtype, Device device) {
  if (!t.defined() || t.numel() != n || t.dtype() != dtype)
    t = Tensor::zeros({n}, dtype, MemCategory::Activations, device);
}
}  // namespace

ModelBase::DeferredOp& ModelBase::next_deferred() {
  DeferredQueue& q = deferred_[static_cast<size_t>(slot_)];
  if (q.used == q.ops.size()) q.ops.emplace_back();
  return q.ops[q.used++];
}

void ModelBase::report_ready(int64_t begin, int64_t end) {
  if (!deferring_) {
    if (grad_ready_hook_) grad_ready_hook_(begin, end);
    return;
  }
  DeferredOp& op = next_deferred();
  op.dw = nullptr;
  op.is_event = false;
  op.begin = begin, op.end = end;
}

void ModelBase::defer_event(ParamEvent ev, int unit) {
  DeferredOp& op = next_deferred();
  op.dw = nullptr;
  op.is_event = true;
  op.event = ev, op.unit = unit;
}

bool ModelBase::defer_weight_grad(float* dw, const float* dout, const uint16_t* dout_h,
                                  const float* inp, const uint16_t* inp_h, int64_t N, int64_t C,
                                  int64_t OC) {
  if (!deferring_ || !dw) return false;
  DeferredOp& op = next_deferred();
  op.dw = dw;
  op.is_event = false;
  op.N = N, op.C = C, op.OC = OC;
  const Device dev = k_->device;
  if (!half_.mixed()) {
    hold(op.dout, N * OC, DType::F32, dev);
    hold(op.inp, N * C, DType::F32, dev);
    k_->copy(stream_, op.dout.data<float>(), dout, N * OC);
    k_->copy(stream_, op.inp.data<float>(), inp, N * C);
    return true;
  }
  // The 16-bit values the undivided backward's product reads.
  const HalfFormat h = half_.format();
  hold(op.dout, N * OC, DType::U16, dev);
  hold(op.inp, N * C, DType::U16, dev);
  if (dout_h)
    runtime_for(dev).copy(op.dout.raw(), dev, dout_h, dev, 2 * static_cast<size_t>(N * OC), stream_);
  else
    k_->to_half(stream_, h, dout, op.dout.data<uint16_t>(), N * OC);
  if (inp_h)
    runtime_for(dev).copy(op.inp.raw(), dev, inp_h, dev, 2 * static_cast<size_t>(N * C), stream_);
  else
    k_->to_half(stream_, h, inp, op.inp.data<uint16_t>(), N * C);
  return true;
}

void ModelBase::backward_stage_input(const float* output_grad, float loss_scale) {
  // LoRA adapters on a frozen base take their (rank-r, small) weight
  // gradients here with their input gradients: nothing of theirs is queued.
  deferred_.resize(static_cast<size_t>(slots_));
  MT_CHECK(deferred_[static_cast<size_t>(slot_)].used == 0, "activation slot {}: a second input-"
           "gradient backward before the first one's weight part", slot_);
  deferring_ = true;
  try {
    backward_stage(output_grad, loss_scale);
  } catch (...) {
    deferring_ = false;
    deferred_[static_cast<size_t>(slot_)].used = 0;
    throw;
  }
  deferring_ = false;
}

void ModelBase::backward_stage_weights() {
  MT_CHECK(static_cast<size_t>(slot_) < deferred_.size() && deferred_[static_cast<size_t>(slot_)].used > 0,
           "activation slot {}: a weight-gradient backward without its input part", slot_);
  DeferredQueue& q = deferred_[static_cast<size_t>(slot_)];
  for (size_t i = 0; i < q.used; ++i) {
    const DeferredOp& op = q.ops[i];
    if (op.is_event) {
      if (param_hook_) param_hook_(op.event, op.unit, true);
    } else if (!op.dw) {
      if (grad_ready_hook_) grad_ready_hook_(op.begin, op.end);
    } else if (half_.mixed()) {
      k_->matmul_backward_weight_half(stream_, half_.format(), op.dw, op.dout.data<uint16_t>(),
                                      op.inp.data<uint16_t>(), op.N, op.C, op.OC);
    } else {
      k_->matmul_backward(stream_, nullptr, op.dw, nullptr, op.dout.data<float>(),
                          op.inp.data<float>(), nullptr, op.N, op.C, op.OC, false);
    }
  }
  q.used = 0;
}

}  // namespace meshtrain
