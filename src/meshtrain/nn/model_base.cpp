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

}  // namespace meshtrain
