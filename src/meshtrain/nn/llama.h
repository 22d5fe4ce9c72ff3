// A Llama-style decoder with explicit forward and backward (no autograd), on
// flat parameter and gradient buffers (layout: nn/llama_spec.h). Per block:
//   x1 = RMSNorm(x); q|k|v = x1 Wqkv^T; rotary on q and k; causal attention
//   with grouped-query heads (each k/v head serves n_head / n_kv_head query
//   heads); x2 = x + att Wo^T; x3 = RMSNorm(x2); gate|up = x3 Wgu^T;
//   out = x2 + (silu(gate) * up) Wdown^T.
// Then RMSNorm, the untied lm_head and softmax cross-entropy. Recompute none,
// full, every:K and selective (nn/recompute.h). Mixed precision (bf16/fp16):
// the f32 parameters are the masters; the matrices and the embedding have a
// 16-bit copy (refreshed at each unit's forward Need, or kept current by
// ZeRO) that every GEMM and the embedding lookup read; GEMM inputs and output
// gradients are rounded right before each product; norms, rotary,
// attention, SwiGLU, the loss and all gradient accumulation stay f32.
//
// Tensor parallelism (Megatron): the same code on a shard (LlamaDims) with
// four tp allreduces per layer and step: after the row-parallel o_proj and
// down_proj (forward), and of the column-parallel QKV and gate|up GEMMs'
// input gradients (backward). The embedding is vocabulary-parallel (rows
// outside the shard's range contribute zero, one allreduce), the head too,
// with a loss that never gathers the logits (nn/vocab_parallel_loss.h). The
// norms are whole on every shard and see the same inputs, so their
// gradients agree without communication.
#pragma once
#include <memory>
#include <vector>

#include "meshtrain/kernels/cpu/rope.h"
#include "meshtrain/kernels/kernel_table.h"
#include "meshtrain/nn/llama_spec.h"
#include "meshtrain/nn/model_base.h"

namespace meshtrain {

struct LlamaActivations;
struct LlamaBlockActivations;

class Llama final : public ModelBase {
 public:
  Llama(std::shared_ptr<const LlamaSpec> spec, ModelBuffers buffers);
  explicit Llama(const LlamaConfig& cfg) : Llama(LlamaSpec::make(cfg), {}) {}
  ~Llama() override;

  const ModelSpec& spec() const override { return *spec_; }
  const LlamaConfig& config() const { return cfg_; }
  const Tensor& param_buffer() const override { return params_; }
  const Tensor& grad_buffer() const override { return grads_; }

  // N(0, 0.02) matrices and embeddings (padded vocabulary rows zero), unit norms.
  void init_weights(uint64_t seed) override;
  float forward(const MicroBatch& batch) override { return forward_stage(batch, nullptr); }
  void backward(float loss_scale) override { backward_stage(nullptr, loss_scale); }
  // Pipeline stages (Model): a stage's input and output are the residual
  // stream (B, T, C) before its first and after its last layer.
  float forward_stage(const MicroBatch& batch, const float* input) override;
  void backward_stage(const float* output_grad, float loss_scale) override;
  const float* stage_output() const override;
  const float* stage_input_grad() const override;
  int64_t stage_width() const override { return dims_.C; }
  int64_t stage_floats(int B, int T) const override {
    return dims_.local_rows(static_cast<int64_t>(B) * T) * dims_.C;
  }
  const float* logits() const override;
  // A tensor-parallel shard's logits are its vocabulary slice (dims().Vl wide).
  int logits_stride() const override { return static_cast<int>(dims_.Vl); }

  void freeze(std::shared_ptr<LinearAdapters> adapters) override;
  void release_activations() override;

 private:
  void ensure_activations(int B, int T);
  const float* w(int64_t offset) const { return params_.data<float>() + offset; }
  float* g(int64_t offset) const { return grads_.data<float>() + offset; }
  void ready(int unit);
  // out (N, OC) (+)= inp (N, C) @ W^T for the matrix at `w_offset`, in the
  // model's precision.
  void linear_forward(float* out, const float* inp, int64_t w_offset, int64_t N, int64_t C,
                      int64_t OC, bool accumulate = false);
  // dinp (N, C) = dout @ W (may be null); dW += dout^T @ inp (skipped with
  // a null inp).
  void linear_backward(float* dinp, int64_t w_offset, const float* dout, const float* inp,
                       int64_t N, int64_t C, int64_t OC);
  // A column-parallel GEMM's backward with its input gradient summed over
  // tp while the weight gradient is computed (the overlap): dinp = dout W,
  // the reduction started, then dW; returns the pending sum.
  PendingGradient column_parallel_backward(float* dinp, int64_t w_offset, const float* dout,
                                           const float* inp, int64_t N, int64_t C, int64_t OC);
  const uint16_t* hw(int64_t offset) const { return half_.at(offset); }
  // Block l from `input`; with `output`, also its output (backward's recompute passes null).
  void block_forward(int l, const float* input, const LlamaBlockActivations& s, float* output);
  void attention_core_forward(const LlamaBlockActivations& s);
  // The head's backward (loss, lm_head, final norm) into the residual-stream gradient.
  void head_backward(float loss_scale);
  void block_backward(int l, const float* input, const LlamaBlockActivations& s);
  // GQA: q|k|v with k, v repeated per query head, the layout the attention kernel reads.
  void expand_kv(const float* qkv, float* full) const;
  // GQA: folds the full-head gradient back onto the shared k, v heads.
  void fold_kv(const float* dfull, float* dqkv) const;

  // Row-parallel GEMM into `out` (this rank's rows): out = residual + inp
  // W^T summed over the tp group (Megatron's g: an allreduce, or a reduce-
  // scatter under sequence parallelism). The whole model adds in one GEMM.
  void row_parallel_forward(float* out, const float* residual, const float* inp, int64_t w_offset,
                            int64_t N, int64_t K);
  // Starts summing the (N, C) input gradient of a column-parallel GEMM over
  // the tp group (f's backward): in place, or reduce-scattered to this
  // rank's rows under sequence parallelism; get() waits and says where.
  PendingGradient start_reduce_input_grad(float* dinp, int64_t N);
  // Sequence parallelism: this rank's rows of an (N, C) activation
  // allgathered into `full` (returned); otherwise `local` itself.
  const float* gather_rows(const float* local, float* full, int64_t N);
  // RMSNorm backward over this rank's rows; under sequence parallelism the
  // gain's gradient is summed over tp before it is accumulated.
  void norm_backward(float* dinp, int64_t gain, const float* dout, const float* inp,
                     const float* rstd, int64_t rows);

  std::shared_ptr<const LlamaSpec> spec_;
  LlamaConfig cfg_;
  LlamaDims dims_;
  Tensor params_, grads_;
  Tensor rope_angles_;   // cos then sin of every (position, pair), on the model's device
  RopeView rope_view_;   // over rope_angles_
  std::unique_ptr<LlamaActivations> acts_;
  int B_ = 0, T_ = 0;
  int64_t counted_ = 0;
  // The activation slots not selected (ModelBase::select_slot), by index.
  std::vector<SlotState<LlamaActivations>> parked_;
  void switch_slot(int from, int to) override;
  // Frozen under LoRA adapters: the norms' gain gradients go to a scratch row.
  std::vector<float> frozen_gain_grad_;
};

}  // namespace meshtrain
