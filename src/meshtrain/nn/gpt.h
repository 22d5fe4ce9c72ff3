// GPT-2 model with explicit forward and backward (no autograd): parameters in
// one flat buffer, gradients in another, activations laid out up front for the
// largest (B, T) seen.
//
// Tensor parallelism (Megatron): the same code on a shard (GPTDims, layout in
// gpt_spec.cpp) with four tp allreduces per layer and step: after the
// row-parallel attention and MLP projections (forward) and of the column-
// parallel c_attn and c_fc GEMMs' input gradients (backward); a row-parallel
// bias is added once. The tied embedding is vocabulary-parallel: the lookup
// is summed over the group (one allreduce) and the head's loss never
// gathers the logits (nn/vocab_parallel_loss.h). Sequence parallelism turns
// each allreduce into a reduce-scatter, with allgathers before the GEMMs,
// and sums each step's LayerNorm parameter gradients over tp.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>

#include "meshtrain/core/tensor.h"
#include "meshtrain/kernels/kernel_table.h"
#include "meshtrain/nn/gpt_config.h"
#include "meshtrain/nn/gpt_params.h"
#include "meshtrain/nn/gpt_spec.h"
#include "meshtrain/nn/model_base.h"
#include "meshtrain/nn/precision.h"
#include "meshtrain/nn/recompute.h"

namespace meshtrain {

struct GPTActivations;  // defined in gpt_activations.h
struct GPTBlockActivations;

class GPT final : public ModelBase {
 public:
  // On `buffers` (nn/model.h: empty tensors are allocated here).
  GPT(std::shared_ptr<const GPTSpec> spec, ModelBuffers buffers);
  explicit GPT(const GPTConfig& cfg);
  // Gradients in a caller-provided buffer of num_params() f32 (e.g. memory
  // the communicator's peers can map, so bucket allreduces need no copy-in).
  // The buffer's memory must outlive the model; it is zeroed here.
  GPT(const GPTConfig& cfg, Tensor grad_buffer);
  // Parameters and gradients both in caller-provided buffers of num_params()
  // f32 (ZeRO-3 keeps only the units in use resident). Neither is zeroed.
  GPT(const GPTConfig& cfg, Tensor param_buffer, Tensor grad_buffer, bool zero_grads);
  ~GPT() override;
  GPT(const GPT&) = delete;
  GPT& operator=(const GPT&) = delete;

  // GPT-2 initialization: N(0, 0.02) weights, residual projections scaled by
  // 1/sqrt(2L), zero biases, unit LayerNorm gains; padded vocab rows zero.
  void init_weights(uint64_t seed) override;

  const ModelSpec& spec() const override { return *spec_; }
  const GPTDims& dims() const { return dims_; }
  void freeze(std::shared_ptr<LinearAdapters> adapters) override;
  void release_activations() override;
  const Tensor& param_buffer() const override { return param_buf_; }
  const Tensor& grad_buffer() const override { return grad_buf_; }
  const GPTConfig& config() const { return cfg_; }
  GPTParams& params() { return params_; }
  const GPTParams& params() const { return params_; }
  GPTParams& grads() { return grads_; }
  const GPTParams& grads() const { return grads_; }

  // Forward on inputs (B,T) of token ids. With targets (B,T), returns the mean
  // cross-entropy loss (targets < 0 are ignored); without, returns NaN and only
  // logits are computed. T may be shorter than config().seq_len, never longer.
  float forward(const int32_t* inputs, const int32_t* targets, int B, int T);
  float forward(const MicroBatch& b) override { return forward(b.inputs, b.targets, b.B, b.T); }
  // Pipeline stages (Model): a stage's input and output are the residual
  // stream (B, T, C) before its first and after its last layer.
  float forward_stage(const MicroBatch& b, const float* input) override;
  void backward_stage(const float* output_grad, float loss_scale) override;
  const float* stage_output() const override;
  const float* stage_input_grad() const override;
  int64_t stage_width() const override { return dims_.C; }
  int64_t stage_floats(int B, int T) const override {
    return dims_.local_rows(static_cast<int64_t>(B) * T) * dims_.C;
  }
  // Logits of the last forward, (B, T, padded_vocab); after backward() the
  // buffer holds the logit gradients instead. A tensor-parallel shard's are
  // its vocabulary columns (dims().Vl wide).
  const float* logits() const override;
  int logits_stride() const override { return static_cast<int>(dims_.Vl); }
  // Per-position losses of the last forward with targets, (B, T).
  const float* losses() const;

  // Accumulates d(loss * loss_scale)/d(params) into grads() for the last
  // forward (which must have had targets). loss_scale = 1/grad_accum for
  // accumulation, or the fp16 loss scale.
  void backward(float loss_scale = 1.0f) override { backward_stage(nullptr, loss_scale); }

  // The grad-ready hook (ModelBase) is called during backward each time a
  // contiguous range [begin, end) of the gradient buffer has received its last
  // contribution, in the order backward produces them (last layer first). Data
  // parallelism launches bucket reductions from here.
  //
  // The parameter hook (ModelBase) is called when forward or backward is about to use the parameters of a unit
  // (GPTParams::unit_range) and when it is done with them until the next
  // Need. ZeRO-3 gathers a unit's parameters on Need, frees them on Done and
  // prefetches the next unit of the order below meanwhile. GradBegin/GradEnd
  // bracket a gradient write made without the unit's parameters: the tied
  // embedding's weight gradient at the backward head (dwte += dlogits^T lnf)
  // comes after Done 0, so ZeRO-3 never holds the gathered wte and the whole
  // wte gradient at once (ZeRO-2/3 count that gradient from GradBegin and
  // start reducing it at GradEnd). Every other gradient is written inside its
  // unit's backward Need/Done. Order of calls:
  //   forward:  Need/Done 0 (embedding), Need/Done 1..L (layers), Need L+1,
  //             Need 0 (output projection), Done 0, Done L+1
  //   backward: Need 0, Need L+1 (head: dlnf = dlogits wte), Done 0,
  //             GradBegin 0, GradEnd 0 (dwte), Done L+1 (after the final
  //             LayerNorm backward), Need/Done L..1 (layers, last first);
  //             the embedding backward (encoder: wte rows of the batch's
  //             tokens, wpe) reads no parameters and is reported by the
  //             grad-ready hook only.
  // Hooks that only track parameters ignore GradBegin/GradEnd. GPTSpec's
  // layout().order is this sequence as data.
  using ParamEvent = meshtrain::ParamEvent;

  // Activation checkpointing (nn/recompute.h). Recomputed activations are
  // re-run in backward with the same kernels and thread count, so losses and
  // gradients are bit-identical to Recompute::none(). A recomputed block's
  // forward runs inside its backward Need/Done (the hook order above holds
  // for every policy). Set with set_recompute (ModelBase).

  // Mixed precision (nn/precision.h). params() and grads() stay f32: the
  // parameters are the f32 master weights the optimizer updates (and
  // checkpoints and the data-parallel broadcast see). With bf16/fp16 the
  // model also holds a 16-bit compute copy of its weight matrices
  // (MemCategory::Parameters, 2 bytes per parameter), refreshed from params()
  // at each unit's forward Need (so after any update, load or gather; under
  // ZeRO the copy is external and kept current by ZeRO instead), and
  // every GEMM runs on 16-bit operands with f32 accumulation; the activations
  // that only feed GEMMs are stored in 16 bits (gpt_activations.h). LayerNorm,
  // softmax, loss, GELU, attention and all gradient accumulation stay f32.
  // Set with set_precision (ModelBase). Under ZeRO (parallel/zero.h,
  // use_external_half_copy) the 16-bit copy lives in
  // `buffer` (num_params() elements of the 16-bit dtype) and is kept current
  // by the caller (gathered from the ranks that own the f32 master shards),
  // so the model never rounds params() itself and reads only the f32
  // parameters that are not GEMM weights (wpe, biases, LayerNorm). Call
  // after set_precision() with a mixed precision.

  // Bytes the activation buffers take for (B, T) under a policy: exactly what
  // the allocator counts as MemCategory::Activations for this model.
  static int64_t activation_bytes(const GPTConfig& cfg, int B, int T,
                                  const Recompute& recompute = {},
                                  Precision precision = Precision::FP32);
  // Bytes of attention scratch (MemCategory::Workspace) for T and a thread count.
  static int64_t workspace_bytes(const GPTConfig& cfg, int T, int nthreads);

 private:
  // A GEMM's input as the model stores it: f32, or its 16-bit rounding
  // under mixed precision.
  struct GemmIn {
    const float* f = nullptr;
    const uint16_t* h = nullptr;
  };
  void ensure_activations(int B, int T);
  // Checks the micro-batch against the model and this stage (ids in range,
  // an input where the stage does not embed) before anything runs.
  void check_micro_batch(const int32_t* inputs, const int32_t* targets, const float* input, int B,
                         int T) const;
  // The head: final LayerNorm, logits and (with targets) the loss.
  float head_forward(const float* last, const int32_t* targets);
  // Its backward into the residual-stream gradient.
  void head_backward(float loss_scale);
  // Block l's forward from `input` into `s`; with `output`, also the block's
  // output (the residual stream); backward's recompute passes null (stored).
  void block_forward(int l, const float* input, const GPTBlockActivations& s, float* output);
  void block_backward(int l, const float* input, const GPTBlockActivations& s);
  void attention_core_forward(const GPTBlockActivations& s);
  // The token and position embeddings of the batch into the residual stream.
  void embed(const int32_t* inputs);
  // Their gradients from the residual stream's (the lookup reads no parameters).
  void embed_backward();
  // out (N, OC) (+)= in (N, K) W^T (+ bias), in the model's precision.
  void linear_forward(float* out, GemmIn in, const Tensor& w, const float* bias, int64_t N,
                      int64_t K, int64_t OC, bool accumulate);
  // dinp (N, K) = dout W (may be null); dW += dout^T in; dbias += column sums.
  void linear_backward(float* dinp, const Tensor& dw, float* dbias, const float* dout, GemmIn in,
                       const Tensor& w, int64_t N, int64_t K, int64_t OC);
  // A column-parallel GEMM's backward with its input gradient summed over
  // tp while the weight gradient is computed (the overlap): dinp = dout W,
  // the reduction started, then dW and dbias; returns the pending sum.
  PendingGradient column_parallel_backward(float* dinp, const Tensor& dw, float* dbias,
                                           const float* dout, GemmIn in, const Tensor& w,
                                           int64_t N, int64_t K, int64_t OC);
  // LayerNorm over `rows` rows into out (f32) or out_h (its 16-bit rounding).
  void norm_forward(float* out, uint16_t* out_h, float* mean, float* rstd, const float* x,
                    const Tensor& w, const Tensor& b, int64_t rows);
  // LayerNorm backward over this rank's rows; under sequence parallelism the
  // weight and bias gradients are summed over tp before they accumulate.
  void norm_backward(float* dinp, const Tensor& dw, const Tensor& db, const float* dout,
                     const float* x, const Tensor& w, const float* mean, const float* rstd,
                     int64_t rows);
  // Sequence parallelism: this rank's rows of a C-wide GEMM input
  // allgathered (all N rows); otherwise `local` itself.
  GemmIn gather_rows(GemmIn local, int64_t N);
  // The same for a residual-stream gradient (f32).
  const float* gather_grad(const float* local, int64_t N);
  // Row-parallel GEMM into `out` (this rank's rows): residual + in W^T + bias,
  // the products summed over the tp group (Megatron's g).
  void row_parallel_forward(float* out, const float* residual, GemmIn in, const Tensor& w,
                            const Tensor& bias, int64_t N, int64_t K);
  // Starts summing the (N, C) input gradient of a column-parallel GEMM over
  // the tp group (f's backward): in place, or reduce-scattered to this
  // rank's rows under sequence parallelism; get() waits and says where.
  PendingGradient start_reduce_input_grad(float* dinp, int64_t N);
  // Mixed precision: the 16-bit copy of parameter `p` (a view of params()).
  const uint16_t* half_weight(const Tensor& p) const;
  // Rounds unit `unit`'s weight matrices from params() into the 16-bit copy.
  void refresh_half_weights(int unit);
  std::shared_ptr<const GPTSpec> spec_;
  GPTConfig cfg_;
  GPTDims dims_;
  // The flat element a weight view starts at, and a GEMM input for adapters.
  int64_t offset_of(const Tensor& w) const { return w.data<float>() - param_buf_.data<float>(); }
  AdapterInput adapter_input(GemmIn in) const {
    return {in.f, half_.mixed() ? in.h : nullptr, half_.format()};
  }
  // Frozen under LoRA adapters: the norms' gradients go to a scratch row.
  std::vector<float> frozen_norm_grad_;
  Tensor param_buf_, grad_buf_;
  GPTParams params_, grads_;
  std::unique_ptr<GPTActivations> acts_;
  int B_ = 0, T_ = 0;          // shape of the last forward
  int scratch_block_ = -1;     // the block whose activations the scratch slot holds
  float mean_loss_ = 0.f;
  int64_t counted_ = 0;  // positions with a target in the last forward
  // The activation slots not selected (ModelBase::select_slot), by index.
  std::vector<SlotState<GPTActivations>> parked_;
  void switch_slot(int from, int to) override;
};

}  // namespace meshtrain
