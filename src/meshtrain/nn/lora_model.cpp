#include "meshtrain/nn/lora_model.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "meshtrain/core/error.h"
#include "meshtrain/core/rng.h"
#include "meshtrain/kernels/kernel_table.h"

namespace meshtrain {

// The adapters' arithmetic, called by the frozen base (nn/linear_adapters.h).
// For a site with W rows [o, o + rows) of the GEMM's output:
//   forward   u = inp A^T (N, r), saved;  out[:, o:o+rows] += s u B^T
//   backward  dB += s dout_o^T u;  du = s dout_o B;  dA += du^T inp;  dinp += du A
class LoraAdapters final : public LinearAdapters {
 public:
  LoraAdapters(const LoraSpec& spec, const Tensor& params, const Tensor& grads)
      : spec_(spec), params_(params), grads_(grads), k_(&kernels_for(params.device())),
        stream_(default_stream(params.device())) {}

  void set_mixed(bool mixed) {
    mixed_ = mixed;
    release();  // the scratch depends on it
  }
  void release() {
    for (Slot& s : slots_) s = Slot();
    du_ = half_ = Tensor();
    scratch_N_ = -1;
  }
  // One set of saved products per activation slot (Model::set_activation_slots).
  void set_slots(int n) {
    slots_.assign(static_cast<size_t>(n), Slot());
    slot_ = 0;
  }
  void select(int slot) { slot_ = static_cast<size_t>(slot); }

  void forward(int64_t w_offset, float* out, AdapterInput inp, int64_t N, int64_t K,
               int64_t OC) override {
    ensure(N);
    const int64_t r = spec_.config().rank;
    for (size_t i = spec_.first_site_at(w_offset); i < spec_.sites().size(); ++i) {
      const LoraSpec::Site& s = spec_.sites()[i];
      if (s.w_begin >= w_offset + OC * K) break;
      const int64_t o = check_site(s, w_offset, K, OC);
      float* u = saved(i, N);
      product_with_a(u, s, inp, N);
      k_->sgemm(stream_, false, true, N, s.rows, r, spec_.config().scale(), u, r, p(s.b), r, 1.f, out + o,
                OC);
    }
  }

  void backward(int64_t w_offset, float* dinp, const float* dout, AdapterInput inp, int64_t N,
                int64_t K, int64_t OC) override {
    const int64_t r = spec_.config().rank;
    const float scale = spec_.config().scale();
    MT_CHECK(N == slots_[slot_].N, "LoRA backward over {} rows after a forward over {}", N,
             slots_[slot_].N);
    ensure_scratch(N);
    for (size_t i = spec_.first_site_at(w_offset); i < spec_.sites().size(); ++i) {
      const LoraSpec::Site& s = spec_.sites()[i];
      if (s.w_begin >= w_offset + OC * K) break;
      const int64_t o = check_site(s, w_offset, K, OC);
      const float* u = saved(i, N);
      const float* dout_o = dout + o;  // (N, rows) with row stride OC
      k_->sgemm(stream_, true, false, s.rows, r, N, scale, dout_o, OC, u, r, 1.f, g(s.b), r);
      float* du = du_.data<float>();
      k_->sgemm(stream_, false, false, N, r, s.rows, scale, dout_o, OC, p(s.b), r, 0.f, du, r);
      if (inp.h && mixed_) {
        uint16_t* du_h = half_.data<uint16_t>();
        k_->to_half(stream_, inp.format, du, du_h, N * r);
        k_->matmul_backward_weight_half(stream_, inp.format, g(s.a), du_h, inp.h, N, K, r);
      } else {
        MT_CHECK(inp.f, "LoRA backward needs the layer input");
        k_->sgemm(stream_, true, false, r, K, N, 1.f, du, r, inp.f, K, 1.f, g(s.a), K);
      }
      if (dinp) k_->sgemm(stream_, false, false, N, K, r, 1.f, du, r, p(s.a), K, 1.f, dinp, K);
    }
  }

 private:
  float* p(int64_t off) const { return params_.data<float>() + off; }
  float* g(int64_t off) const { return grads_.data<float>() + off; }
  float* saved(size_t site, int64_t N) const {
    return slots_[slot_].acts.data<float>() + static_cast<int64_t>(site) * N * spec_.config().rank;
  }

  int64_t check_site(const LoraSpec::Site& s, int64_t w_offset, int64_t K, int64_t OC) const {
    const int64_t o = (s.w_begin - w_offset) / K;
    MT_CHECK(s.cols == K && (s.w_begin - w_offset) % K == 0 && o + s.rows <= OC,
             "LoRA adapter on {} ({} x {}) does not fit the GEMM at element {} ({} x {})", s.name,
             s.rows, s.cols, w_offset, OC, K);
    return o;
  }

  // u (N, r) = inp A^T: f32, or from the 16-bit input with A rounded.
  void product_with_a(float* u, const LoraSpec::Site& s, AdapterInput inp, int64_t N) {
    const int64_t r = spec_.config().rank, K = s.cols;
    if (inp.h && mixed_) {
      uint16_t* a_h = half_.data<uint16_t>() + N * r;
      k_->to_half(stream_, inp.format, p(s.a), a_h, r * K);
      k_->matmul_forward_half(stream_, inp.format, u, inp.h, a_h, nullptr, N, K, r, false);
      return;
    }
    MT_CHECK(inp.f, "LoRA forward needs the f32 layer input");
    k_->sgemm(stream_, false, true, N, r, K, 1.f, inp.f, K, p(s.a), K, 0.f, u, r);
  }

  // The selected slot's saved products and the shared scratch for N rows
  // (LoraSpec::adapter_memory).
  void ensure(int64_t N) {
    const ModelMemory m = spec_.adapter_memory(N, mixed_ ? Precision::BF16 : Precision::FP32);
    Slot& slot = slots_[slot_];
    if (slot.N != N) {
      slot.acts = Tensor();
      slot.acts = Tensor::zeros({m.activations / 4}, DType::F32, MemCategory::Activations);
      slot.N = N;
    }
    ensure_scratch(N);
  }
  void ensure_scratch(int64_t N) {
    if (scratch_N_ == N) return;
    const int64_t r = spec_.config().rank;
    const ModelMemory m = spec_.adapter_memory(N, mixed_ ? Precision::BF16 : Precision::FP32);
    du_ = half_ = Tensor();
    du_ = Tensor::zeros({N * r}, DType::F32, MemCategory::Workspace);
    if (mixed_) half_ = Tensor::zeros({(m.workspace - N * r * 4) / 2}, DType::BF16, MemCategory::Workspace);
    scratch_N_ = N;
  }

  const LoraSpec& spec_;
  Tensor params_, grads_;
  const KernelTable* k_;
  Stream stream_;
  bool mixed_ = false;
  struct Slot {
    Tensor acts;  // each site's u = inp A^T
    int64_t N = -1;
  };
  std::vector<Slot> slots_ = std::vector<Slot>(1);
  size_t slot_ = 0;
  int64_t scratch_N_ = -1;
  Tensor du_, half_;
};

LoraModel::LoraModel(std::shared_ptr<const LoraSpec> spec, ModelBuffers buffers)
    : spec_(std::move(spec)) {
  ModelBuffers b = adopt_buffers(std::move(buffers), spec_->layout().numel);
  params_ = std::move(b.params);
  grads_ = std::move(b.grads);
  ModelBuffers frozen;
  frozen.frozen = true;
  base_ = spec_->base().build(std::move(frozen));
  adapters_ = std::make_shared<LoraAdapters>(*spec_, params_, grads_);
  base_->freeze(adapters_);
  // The base's events of blocks with adapters are this model's; a block's
  // adapter gradients are final when its backward is done.
  base_->set_param_hook([this](ParamEvent e, int base_unit, bool backward) {
    const int u = spec_->unit_of_base(base_unit);
    if (u < 0 || (e != ParamEvent::Need && e != ParamEvent::Done)) return;
    if (param_hook_) param_hook_(e, u, backward);
    if (e == ParamEvent::Done && backward && grad_ready_) {
      const ParamUnit& unit = spec_->layout().units[static_cast<size_t>(u)];
      if (holding_) holding_->push_back({unit.begin, unit.end});
      else grad_ready_(unit.begin, unit.end);
    }
  });
}

LoraModel::~LoraModel() = default;

void LoraModel::init_weights(uint64_t seed) {
  base_->init_weights(seed);
  params_.zero_();  // B = 0
  Rng rng(seed ^ 0x4c6f5241ull);  // "LoRA": a stream apart from the base's
  for (int64_t i = 0; i < spec_->init_draws_before(); ++i) rng.next_u64();  // a stage's place in it
  float* p = params_.data<float>();
  for (const LoraSpec::Site& s : spec_->sites()) {
    const float bound = 1.f / std::sqrt(static_cast<float>(s.cols));
    const int64_t n = static_cast<int64_t>(spec_->config().rank) * s.cols;
    for (int64_t i = 0; i < n; ++i) p[s.a + i] = bound * (2.f * rng.uniform() - 1.f);
  }
}

void LoraModel::set_activation_slots(int n) {
  base_->set_activation_slots(n);
  adapters_->set_slots(n);
  held_ready_.assign(static_cast<size_t>(n), {});
  slot_ = 0;
}

void LoraModel::select_slot(int slot) {
  base_->select_slot(slot);
  adapters_->select(slot);
  slot_ = static_cast<size_t>(slot);
}

void LoraModel::backward_stage_input(const float* output_grad, float loss_scale) {
  held_ready_.resize(std::max(held_ready_.size(), slot_ + 1));
  holding_ = &held_ready_[slot_];
  try {
    base_->backward_stage_input(output_grad, loss_scale);
  } catch (...) {
    holding_ = nullptr;
    throw;
  }
  holding_ = nullptr;
}

void LoraModel::backward_stage_weights() {
  base_->backward_stage_weights();
  MT_CHECK(slot_ < held_ready_.size(), "LoRA: a weight part without its input part");
  std::vector<std::pair<int64_t, int64_t>> ready;
  ready.swap(held_ready_[slot_]);
  if (grad_ready_)
    for (const auto& [begin, end] : ready) grad_ready_(begin, end);
}

void LoraModel::set_precision(Precision p) {
  base_->set_precision(p);
  adapters_->set_mixed(is_mixed(p));
}

Tensor LoraModel::merged_parameters(const Tensor& params) const {
  MT_CHECK(params.numel() == spec_->layout().numel, "merged_parameters: {} adapter values, the "
           "model has {}", params.numel(), spec_->layout().numel);
  Tensor merged = frozen_base_f32(*base_);
  merge_lora(*spec_, params.data<float>(), merged.data<float>(), params.device());
  return merged;
}

Tensor frozen_base_f32(const Model& base) {
  const Tensor& held = base.param_buffer();
  Tensor out = Tensor::zeros({held.numel()}, DType::F32, MemCategory::Other);
  out.copy_from(held);
  if (base.f32_matrices_released()) base.widen_released_matrices(out.data<float>());
  return out;
}

void LoraModel::release_activations() {
  base_->release_activations();
  adapters_->release();
}

void LoraModel::weights_loaded() {
  const Precision held = spec_->config().base_precision;
  if (!is_mixed(held)) return;
  MT_CHECK(precision() == held, "lora.base_dtype = {}: holding the frozen base in 16 bits needs "
           "the run in that precision (precision = bf16 or fp16 as it says), not {}",
           precision_name(held), precision_name(precision()));
  base_->release_f32_matrices();
}

}  // namespace meshtrain
