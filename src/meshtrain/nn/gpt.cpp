#include "meshtrain/nn/gpt.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "meshtrain/core/threads.h"
#include "meshtrain/kernels/cpu/attention.h"
#include "meshtrain/kernels/cpu/convert.h"
#include "meshtrain/kernels/cpu/elementwise.h"
#include "meshtrain/kernels/cpu/encoder.h"
#include "meshtrain/kernels/cpu/gelu.h"
#include "meshtrain/kernels/cpu/layernorm.h"
#include "meshtrain/kernels/cpu/matmul.h"
#include "meshtrain/kernels/cpu/matmul_half.h"
#include "meshtrain/kernels/cpu/softmax_cross_entropy.h"
#include "meshtrain/nn/gpt_activations.h"
#include "meshtrain/nn/vocab_parallel_loss.h"
#include "meshtrain/telemetry/trace_writer.h"

namespace meshtrain {

using namespace cpu;

GPT::GPT(std::shared_ptr<const GPTSpec> spec, ModelBuffers buffers)
    : spec_(std::move(spec)), cfg_(spec_->config()), dims_(spec_->dims()) {
  ModelBuffers b = adopt_buffers(std::move(buffers), dims_.num_params());
  param_buf_ = std::move(b.params);
  grad_buf_ = std::move(b.grads);
  k_ = &kernels_for(param_buf_.device());
  stream_ = default_stream(param_buf_.device());
  params_ = GPTParams::view(dims_, param_buf_);
  // A frozen model (LoRA's base) has no gradient buffer: undefined views.
  if (grad_buf_.defined()) grads_ = GPTParams::view(dims_, grad_buf_);
  else grads_.layers.resize(static_cast<size_t>(dims_.L));
}

GPT::GPT(const GPTConfig& cfg) : GPT(GPTSpec::make(cfg), ModelBuffers{}) {}

GPT::GPT(const GPTConfig& cfg, Tensor grad_buffer)
    : GPT(GPTSpec::make(cfg), ModelBuffers{Tensor(), std::move(grad_buffer), true}) {}

GPT::GPT(const GPTConfig& cfg, Tensor param_buffer, Tensor grad_buffer, bool zero_grads)
    : GPT(GPTSpec::make(cfg), ModelBuffers{std::move(param_buffer), std::move(grad_buffer), zero_grads}) {}

GPT::~GPT() = default;

void GPT::init_weights(uint64_t seed) {
  fill_params_from_host(param_buf_, [&](float* p) {
    spec_->initial_weights(seed, {0, spec_->num_params()}, p);
  });
}

int64_t GPT::activation_bytes(const GPTConfig& cfg, int B, int T, const Recompute& recompute,
                              Precision precision) {
  return 4 * GPTActivations::buffer_floats(GPTDims::make(cfg, {}), B, T, recompute, precision);
}

int64_t GPT::workspace_bytes(const GPTConfig& cfg, int T, int nthreads) {
  return 4 * GPTActivations::workspace_floats(GPTDims::make(cfg, {}), T, nthreads);
}

const uint16_t* GPT::half_weight(const Tensor& p) const {
  return half_.at(p.offset() - params_.flat.offset());
}

// Only GEMM operands are rounded (the layout's half_weight): wte (the tied
// classifier, and the token embedding lookup) and each layer's matrices.
// Position embeddings, biases and LayerNorm parameters are read in f32.
void GPT::refresh_half_weights(int unit) {
  half_.refresh(spec_->layout(), unit, param_buf_.data<float>(), *k_);
}

void GPT::ensure_activations(int B, int T) {
  const int nt = thread_count();
  if (acts_ && acts_->B == B && acts_->T == T && acts_->nthreads == nt &&
      acts_->recompute == recompute_ && acts_->precision == half_.precision())
    return;
  acts_.reset();  // free first so peak memory holds one layout
  acts_ = std::make_unique<GPTActivations>(dims_, B, T, nt, recompute_, half_.precision(),
                                           param_buf_.device());
}

const float* GPT::logits() const { return acts_ ? acts_->logits : nullptr; }
const float* GPT::losses() const { return acts_ ? acts_->losses : nullptr; }

void GPT::release_activations() {
  acts_.reset();
  parked_.clear();
  release_deferred();
}

void GPT::switch_slot(int from, int to) {
  parked_.resize(static_cast<size_t>(slots_));
  SlotState<GPTActivations>& f = parked_[static_cast<size_t>(from)];
  f.acts = std::move(acts_);
  f.B = B_, f.T = T_, f.scratch_block = scratch_block_, f.mean_loss = mean_loss_;
  f.counted = counted_, f.have_targets = have_targets_;
  SlotState<GPTActivations>& t = parked_[static_cast<size_t>(to)];
  acts_ = std::move(t.acts);
  B_ = t.B, T_ = t.T, scratch_block_ = t.scratch_block, mean_loss_ = t.mean_loss;
  counted_ = t.counted, have_targets_ = t.have_targets;
}

void GPT::freeze(std::shared_ptr<LinearAdapters> adapters) {
  MT_CHECK(dims_.tp_size == 1, "a tensor-parallel GPT shard cannot be frozen under adapters");
  frozen_ = true;
  adapters_ = std::move(adapters);
  half_.freeze();  // the 16-bit copy is rounded once
  frozen_norm_grad_.assign(static_cast<size_t>(2 * dims_.C), 0.f);
}

namespace {
// A gradient's data, or null for a frozen model's undefined view.
float* grad_data(const Tensor& t) { return t.defined() ? t.data<float>() : nullptr; }
}  // namespace

// ---- the pieces every block uses --------------------------------------------

void GPT::linear_forward(float* out, GemmIn in, const Tensor& w, const float* bias, int64_t N,
                         int64_t K, int64_t OC, bool accumulate) {
  if (half_.mixed())
    k_->matmul_forward_half(stream_, half_.format(), out, in.h, half_weight(w), bias, N, K, OC, accumulate);
  else
    k_->matmul_forward(stream_, out, in.f, w.data<float>(), bias, N, K, OC, accumulate);
  if (adapters_) adapters_->forward(offset_of(w), out, adapter_input(in), N, K, OC);
}

void GPT::linear_backward(float* dinp, const Tensor& dw, float* dbias, const float* dout,
                          GemmIn in, const Tensor& w, int64_t N, int64_t K, int64_t OC) {
  // Undefined dw / w: that product is skipped (column_parallel_backward);
  // a frozen model has neither weight nor bias gradients.
  float* dw_p = dw.defined() && !frozen_ ? dw.data<float>() : nullptr;
  if (frozen_) dbias = nullptr;
  // A split backward (zb-h1) queues the weight product for its weight part.
  if (defer_weight_grad(dw_p, dout, nullptr, in.f, in.h, N, K, OC)) dw_p = nullptr;
  // Mixed precision rounds the output gradient once into dout_h for both products.
  if (half_.mixed())
    k_->matmul_backward_half(stream_, half_.format(), dinp, dw_p, dbias, dout, acts_->dout_h, in.h,
                             w.defined() ? half_weight(w) : nullptr, N, K, OC, false);
  else
    k_->matmul_backward(stream_, dinp, dw_p, dbias, dout, in.f, w.defined() ? w.data<float>() : nullptr, N,
                        K, OC, false);
  if (adapters_ && w.defined())
    adapters_->backward(offset_of(w), dinp, dout, adapter_input(in), N, K, OC);
}

PendingGradient GPT::column_parallel_backward(float* dinp, const Tensor& dw, float* dbias,
                                              const float* dout, GemmIn in, const Tensor& w,
                                              int64_t N, int64_t K, int64_t OC) {
  if (dims_.tp_size == 1) {  // nothing to overlap: one fused call
    linear_backward(dinp, dw, dbias, dout, in, w, N, K, OC);
    return {dinp, nullptr};
  }
  linear_backward(dinp, Tensor(), nullptr, dout, {}, w, N, K, OC);
  PendingGradient sum = start_reduce_input_grad(dinp, N);
  // The same rounding of dout again under mixed precision (same values).
  linear_backward(nullptr, dw, dbias, dout, in, Tensor(), N, K, OC);
  return sum;
}

void GPT::norm_forward(float* out, uint16_t* out_h, float* mean, float* rstd, const float* x,
                       const Tensor& w, const Tensor& b, int64_t rows) {
  const int64_t C = dims_.C;
  if (!half_.mixed())
    return k_->layernorm_forward(stream_, out, mean, rstd, x, w.data<float>(), b.data<float>(), rows, C);
  // Computed in f32 in the staging area (dbt4c: free in forward, and when
  // backward recomputes a block), stored rounded.
  float* stage = acts_->dbt4c;
  k_->layernorm_forward(stream_, stage, mean, rstd, x, w.data<float>(), b.data<float>(), rows, C);
  k_->to_half(stream_, half_.format(), stage, out_h, rows * C);
}

void GPT::norm_backward(float* dinp, const Tensor& dw, const Tensor& db, const float* dout,
                        const float* x, const Tensor& w, const float* mean, const float* rstd,
                        int64_t rows) {
  const int64_t C = dims_.C;
  if (frozen_) {  // the gain and bias gradients are not kept
    float* d = frozen_norm_grad_.data();
    return k_->layernorm_backward(stream_, dinp, d, d + C, dout, x, w.data<float>(), mean, rstd, rows, C);
  }
  if (!dims_.sp)
    return k_->layernorm_backward(stream_, dinp, dw.data<float>(), db.data<float>(), dout, x,
                                  w.data<float>(), mean, rstd, rows, C);
  // Each rank saw its rows only: this step's parameter gradients are summed
  // over tp before they join what earlier micro-batches accumulated.
  float* d = acts_->dnorm;
  zero_floats(d, 2 * C);
  k_->layernorm_backward(stream_, dinp, d, d + C, dout, x, w.data<float>(), mean, rstd, rows, C);
  tp_->allreduce_sum(d, 2 * C);
  k_->add_inplace(stream_, dw.data<float>(), d, C);
  k_->add_inplace(stream_, db.data<float>(), d + C, C);
}

GPT::GemmIn GPT::gather_rows(GemmIn local, int64_t N) {
  if (!dims_.sp) return local;
  const int64_t count = dims_.local_rows(N) * dims_.C;
  GPTActivations& a = *acts_;
  if (half_.mixed()) {
    tp_->allgather_half(local.h, a.gathered_h, count);
    return {nullptr, a.gathered_h};
  }
  tp_->allgather(local.f, a.gathered, count);
  return {a.gathered, nullptr};
}

const float* GPT::gather_grad(const float* local, int64_t N) {
  if (!dims_.sp) return local;
  tp_->allgather(local, acts_->gathered2, dims_.local_rows(N) * dims_.C);
  return acts_->gathered2;
}

void GPT::row_parallel_forward(float* out, const float* residual, GemmIn in, const Tensor& w,
                               const Tensor& bias, int64_t N, int64_t K) {
  const int64_t C = dims_.C;
  if (dims_.sp) {
    // The partial products of all N rows, reduce-scattered to this rank's
    // rows; then its residual and the bias.
    float* partial = acts_->dbtc;  // free in forward
    linear_forward(partial, in, w, nullptr, N, K, C, false);
    const int64_t Nl = dims_.local_rows(N);
    tp_->reduce_scatter(partial, out, Nl * C);
    k_->add_inplace(stream_, out, residual, Nl * C);
    k_->add_periodic_rows(stream_, out, bias.data<float>(), Nl, C, /*period=*/1, 0);
    return;
  }
  if (dims_.tp_size == 1 || dims_.tp_rank == 0) {
    // The residual and the bias are added once (by tp rank 0); the add is
    // fused into the GEMM.
    k_->copy(stream_, out, residual, N * C);
    linear_forward(out, in, w, bias.data<float>(), N, K, C, /*accumulate=*/true);
  } else {
    linear_forward(out, in, w, nullptr, N, K, C, false);
  }
  if (dims_.tp_size > 1) tp_->allreduce_sum(out, N * C);
}

PendingGradient GPT::start_reduce_input_grad(float* dinp, int64_t N) {
  const int64_t C = dims_.C;
  if (dims_.sp)
    return {acts_->dbtc_local, tp_->start_reduce_scatter(dinp, acts_->dbtc_local, dims_.local_rows(N) * C)};
  if (dims_.tp_size > 1) return {dinp, tp_->start_allreduce_sum(dinp, N * C)};
  return {dinp, nullptr};
}

// ---- blocks -------------------------------------------------------------------

// The one code path for a block's forward, used by forward and by backward's
// recompute, so recomputed activations are the same floats.
void GPT::attention_core_forward(const GPTBlockActivations& s) {
  GPTActivations& a = *acts_;
  attention_forward(s.atty, s.att_lse, s.qkv, B_, T_, dims_.A, dims_.NH,
                        a.workspace.data<float>(), a.nthreads);
}

// Mixed precision: LayerNorm and GELU compute in f32 into the staging area
// and store their output rounded; the attention output is rounded for its
// GEMM into atty_h.
void GPT::block_forward(int l, const float* residual, const GPTBlockActivations& s,
                        float* residual3) {
  const int64_t C = dims_.C, A = dims_.A, F = dims_.F;
  const int64_t N = static_cast<int64_t>(B_) * T_, Nl = dims_.local_rows(N);
  const GPTLayerParams& p = params_.layers[l];
  const bool mixed = half_.mixed();
  norm_forward(s.ln1, s.ln1_h, s.ln1_mean, s.ln1_rstd, residual, p.ln1w, p.ln1b, Nl);
  linear_forward(s.qkv, gather_rows({s.ln1, s.ln1_h}, N), p.qkvw, p.qkvb.data<float>(), N, C, 3 * A,
                 false);
  attention_core_forward(s);
  GemmIn att{s.atty, nullptr};
  if (mixed) {
    k_->to_half(stream_, half_.format(), s.atty, acts_->atty_h, N * A);
    att = {nullptr, acts_->atty_h};
  }
  row_parallel_forward(s.residual2, residual, att, p.attprojw, p.attprojb, N, A);
  norm_forward(s.ln2, s.ln2_h, s.ln2_mean, s.ln2_rstd, s.residual2, p.ln2w, p.ln2b, Nl);
  linear_forward(s.fch, gather_rows({s.ln2, s.ln2_h}, N), p.fcw, p.fcb.data<float>(), N, C, F, false);
  if (mixed) {
    float* stage = acts_->dbt4c;
    k_->gelu_forward(stream_, stage, s.fch, N * F);
    k_->to_half(stream_, half_.format(), stage, s.fch_gelu_h, N * F);
  } else {
    k_->gelu_forward(stream_, s.fch_gelu, s.fch, N * F);
  }
  // Backward never reads a block's own output, so its recompute stops here.
  if (!residual3) return;
  row_parallel_forward(residual3, s.residual2, {s.fch_gelu, s.fch_gelu_h}, p.fcprojw, p.fcprojb, N, F);
}

// Block l's backward (after any recompute): every GEMM's output gradient is
// rounded once under mixed precision; GELU, attention and LayerNorm
// backward and all gradient accumulation run in f32.
void GPT::block_backward(int l, const float* residual, const GPTBlockActivations& s) {
  GPTActivations& a = *acts_;
  const int64_t C = dims_.C, A = dims_.A, F = dims_.F;
  const int64_t N = static_cast<int64_t>(B_) * T_, Nl = dims_.local_rows(N);
  const GPTLayerParams& p = params_.layers[l];
  GPTLayerParams& g = grads_.layers[l];
  float* dres = a.dresidual;  // this rank's rows (all N without sequence parallelism)
  float* dbt4c = a.dbt4c;
  float* dbtc = a.dbtc;
  // MLP: residual3 = residual2 + fcproj(gelu(fc(ln2(residual2)))). A
  // row-parallel GEMM's output gradient is every row's (gathered under sp),
  // so its bias gradient is whole on every rank.
  linear_backward(dbt4c, g.fcprojw, grad_data(g.fcprojb), gather_grad(dres, N),
                  {s.fch_gelu, s.fch_gelu_h}, p.fcprojw, N, F, C);
  k_->gelu_backward(stream_, dbt4c, s.fch, dbt4c, N * F);
  PendingGradient dln2 = column_parallel_backward(dbtc, g.fcw, grad_data(g.fcb), dbt4c,
                                                  gather_rows({s.ln2, s.ln2_h}, N), p.fcw, N, C, F);
  norm_backward(dres, g.ln2w, g.ln2b, dln2.get(), s.residual2, p.ln2w, s.ln2_mean, s.ln2_rstd, Nl);
  // Attention: residual2 = residual + attproj(attn(qkv(ln1(residual)))).
  GemmIn att{s.atty, nullptr};
  if (half_.mixed()) {  // the attention output as its GEMM saw it
    k_->to_half(stream_, half_.format(), s.atty, a.atty_h, N * A);
    att = {nullptr, a.atty_h};
  }
  float* datty = dbtc;  // (N, A)
  linear_backward(datty, g.attprojw, grad_data(g.attprojb), gather_grad(dres, N), att, p.attprojw,
                  N, A, C);
  float* dqkv = dbt4c;  // (N, 3A)
  attention_backward(dqkv, datty, s.qkv, s.atty, s.att_lse, B_, T_, A, dims_.NH,
                         a.workspace.data<float>(), a.nthreads);
  PendingGradient dln1 = column_parallel_backward(dbtc, g.qkvw, grad_data(g.qkvb), dqkv,
                                                  gather_rows({s.ln1, s.ln1_h}, N), p.qkvw, N, C,
                                                  3 * A);
  norm_backward(dres, g.ln1w, g.ln1b, dln1.get(), residual, p.ln1w, s.ln1_mean, s.ln1_rstd, Nl);
}

// ---- embedding ----------------------------------------------------------------

void GPT::embed(const int32_t* inputs) {
  GPTActivations& a = *acts_;
  const int B = B_, T = T_;
  const int64_t C = dims_.C, N = static_cast<int64_t>(B) * T;
  const bool mixed = half_.mixed();
  const HalfFormat h = half_.format();
  const uint16_t* wte_h = mixed ? half_weight(params_.wte) : nullptr;
  const float* wte = params_.wte.data<float>();
  const float* wpe = params_.wpe.data<float>();
  // The token embedding is read from the 16-bit copy under mixed precision
  // (rounded like every other weight the model computes with), so ZeRO needs
  // no f32 wte.
  if (dims_.tp_size == 1) {
    if (!mixed) return k_->encoder_forward(stream_, a.encoded, inputs, wte, wpe, B, T, C);
    k_->embedding_lookup(stream_, a.encoded, inputs, nullptr, wte_h, h, 0, dims_.V, N, C);
    k_->add_periodic_rows(stream_, a.encoded, wpe, N, C, T, 0);
    return;
  }
  // Vocabulary-parallel: this shard's rows [v0, v0 + Vl); a token elsewhere
  // is another shard's, summed in by the allreduce (exactly: one term is
  // non-zero). Sequence parallelism reduce-scatters all N rows' lookups.
  const int64_t v0 = dims_.v_begin, Vl = dims_.Vl;
  float* looked_up = dims_.sp ? a.gathered2 : a.encoded;
  k_->embedding_lookup(stream_, looked_up, inputs, wte, wte_h, h, v0, Vl, N, C);
  const int64_t Nl = dims_.local_rows(N);
  if (dims_.sp)
    tp_->reduce_scatter(looked_up, a.encoded, Nl * C);
  else
    tp_->allreduce_sum(a.encoded, N * C);
  // The positions of this rank's rows (rows [r Nl, (r + 1) Nl) under sp).
  const int64_t first = dims_.sp ? dims_.tp_rank * Nl : 0;
  k_->add_periodic_rows(stream_, a.encoded, wpe, Nl, C, T, first);
}

void GPT::embed_backward() {
  if (frozen_) return;
  const int B = B_, T = T_;
  const int64_t C = dims_.C, N = static_cast<int64_t>(B) * T;
  const int32_t* inputs = staged_ids(0);
  if (dims_.tp_size == 1)
    return k_->encoder_backward(stream_, grads_.wte.data<float>(), grads_.wpe.data<float>(), acts_->dresidual,
                                inputs, B, T, C);
  // Every token's gradient (gathered under sp): the whole position table's
  // gradient on every rank, and this shard's vocabulary rows; rows in
  // position order (deterministic).
  const float* d = gather_grad(acts_->dresidual, N);
  const int64_t v0 = dims_.v_begin, Vl = dims_.Vl;
  k_->sum_periodic_rows(stream_, grads_.wpe.data<float>(), d, N, C, T);
  k_->embedding_accumulate(stream_, grads_.wte.data<float>(), d, inputs, v0, Vl, N, C);
}

// ---- forward and backward -----------------------------------------------------

void GPT::check_micro_batch(const int32_t* inputs, const int32_t* targets, const float* input,
                            int B, int T) const {
  MT_CHECK(B >= 1, "batch size must be >= 1 (got {})", B);
  MT_CHECK(T >= 1 && T <= cfg_.seq_len,
           "sequence length {} is outside [1, {}] (the model's context, model.seq_len)", T,
           cfg_.seq_len);
  MT_CHECK(dims_.tp_size == 1 || tp_, "a tensor-parallel gpt shard needs its tp group "
           "(set_tensor_parallel_group) before forward");
  const int64_t V = dims_.V, BT = static_cast<int64_t>(B) * T;
  MT_CHECK(!dims_.sp || BT % dims_.tp_size == 0, "sequence parallelism splits the micro-batch's "
           "{} x {} = {} tokens over tp = {}: make batch x seq_len a multiple of {}", B, T, BT,
           dims_.tp_size, dims_.tp_size);
  MT_CHECK(dims_.embeds ? inputs != nullptr : input != nullptr, "pipeline stage of layers {}-{}: "
           "forward needs {}", dims_.layer0, dims_.layer0 + dims_.L - 1,
           dims_.embeds ? "the token ids" : "the previous stage's output");
  for (int64_t i = 0; i < BT; ++i) {
    if (dims_.embeds)
      MT_CHECK(inputs[i] >= 0 && inputs[i] < V, "token id {} at batch {} position {} is outside "
               "the vocabulary [0, {})", inputs[i], i / T, i % T, V);
    if (targets && dims_.heads)
      MT_CHECK(targets[i] < V, "target id {} at batch {} position {} is outside the vocabulary "
               "[0, {})", targets[i], i / T, i % T, V);
  }
}

float GPT::forward(const int32_t* inputs, const int32_t* targets, int B, int T) {
  return forward_stage({inputs, targets, B, T}, nullptr);
}

float GPT::forward_stage(const MicroBatch& mb, const float* input) {
  const int B = mb.B, T = mb.T;
  const int32_t* inputs = mb.inputs;
  const int32_t* targets = mb.targets;
  check_micro_batch(inputs, targets, input, B, T);
  const int64_t C = dims_.C, BT = static_cast<int64_t>(B) * T;
  ensure_activations(B, T);
  GPTActivations& a = *acts_;
  scratch_block_ = -1;
  // The activation buffers are laid out for (B, T); strides below use them.
  B_ = B;
  T_ = T;
  // From here on in the model's memory.
  if (dims_.embeds) inputs = stage_ids(0, inputs, BT);
  if (targets && dims_.heads) targets = stage_ids(1, targets, BT);
  have_targets_ = targets != nullptr || !dims_.heads;
  const int64_t Nl = dims_.local_rows(BT);

  const int L = dims_.L;
  if (dims_.embeds) {
    use_params(ParamEvent::Need, 0, false);
    refresh_half_weights(0);
    embed(inputs);
    use_params(ParamEvent::Done, 0, false);
  } else {
    k_->copy(stream_, a.encoded, input, Nl * C);  // the previous stage's output
  }
  for (int l = 0; l < L; ++l) {
    telemetry::TraceScope trace(telemetry::global_tracer(), "forward layer", dims_.layer0 + l, "compute");
    const int u = dims_.layer_unit(l);
    use_params(ParamEvent::Need, u, false);
    refresh_half_weights(u);
    const float* residual = l == 0 ? a.encoded : a.residual3 + (l - 1) * Nl * C;
    block_forward(l, residual, a.blocks[l], a.residual3 + l * Nl * C);
    if (recompute_.recomputes_block(l) || recompute_.recomputes_attention()) scratch_block_ = l;
    use_params(ParamEvent::Done, u, false);
  }
  if (!dims_.heads) return std::numeric_limits<float>::quiet_NaN();
  return head_forward(a.residual3 + (L - 1) * Nl * C, targets);
}

float GPT::head_forward(const float* last, const int32_t* targets) {
  GPTActivations& a = *acts_;
  const int64_t C = dims_.C, V = dims_.V, Vl = dims_.Vl;
  const int64_t BT = static_cast<int64_t>(B_) * T_, Nl = dims_.local_rows(BT);
  const int fin = dims_.final_unit();
  use_params(ParamEvent::Need, fin, false);
  norm_forward(a.lnf, a.lnf_h, a.lnf_mean, a.lnf_rstd, last, params_.lnfw, params_.lnfb, Nl);
  use_params(ParamEvent::Need, 0, false);
  // wte's 16-bit copy is current since the embedding lookup (the first
  // stage's); a last stage that does not embed rounds its own copy here.
  if (!dims_.embeds) refresh_half_weights(0);
  linear_forward(a.logits, gather_rows({a.lnf, a.lnf_h}, BT), params_.wte, nullptr, BT, C, Vl, false);
  use_params(ParamEvent::Done, 0, false);
  use_params(ParamEvent::Done, fin, false);
  if (!targets) return std::numeric_limits<float>::quiet_NaN();

  const int64_t counted =
      dims_.tp_size == 1
          ? k_->softmax_cross_entropy_forward(stream_, a.losses, a.logits, targets, BT, V, Vl)
          : vocab_parallel_cross_entropy_forward(*k_, stream_, a.losses, a.lse, a.loss_scratch, a.logits, targets,
                                                 BT, {dims_.v_begin, Vl, V}, *tp_);
  // Every target ignored (a masked micro-batch of prompts only): loss 0,
  // and backward adds nothing (nn/model.h).
  const double sum = sum_floats(a.losses, BT);
  mean_loss_ = counted > 0 ? static_cast<float>(sum / counted) : 0.f;
  counted_ = counted;
  return mean_loss_;
}

const float* GPT::stage_output() const {
  if (!acts_ || dims_.heads) return nullptr;
  const int64_t Nl = dims_.local_rows(static_cast<int64_t>(B_) * T_);
  return acts_->residual3 + (dims_.L - 1) * Nl * dims_.C;
}

const float* GPT::stage_input_grad() const {
  return acts_ && !dims_.embeds ? acts_->dresidual : nullptr;
}

void GPT::head_backward(float loss_scale) {
  GPTActivations& a = *acts_;
  const int64_t C = dims_.C, V = dims_.V, Vl = dims_.Vl;
  const int64_t BT = static_cast<int64_t>(B_) * T_, Nl = dims_.local_rows(BT);
  const int32_t* targets = staged_ids(1);
  const int64_t total = dims_.num_params();
  const int fin = dims_.final_unit();
  // Classifier: logits -> dlogits in place, then through the tied embedding.
  use_params(ParamEvent::Need, 0, true);
  use_params(ParamEvent::Need, fin, true);
  const float dloss = counted_ > 0 ? loss_scale / static_cast<float>(counted_) : 0.f;
  if (dims_.tp_size == 1)
    k_->softmax_cross_entropy_backward(stream_, a.logits, targets, dloss, BT, V, Vl);
  else
    vocab_parallel_cross_entropy_backward(*k_, stream_, a.logits, a.lse, targets, dloss, BT, {dims_.v_begin, Vl, V});
  float* dlnf = a.dbtc;
  const bool mixed = half_.mixed();
  const HalfFormat h = half_.format();
  const GemmIn lnf = gather_rows({a.lnf, a.lnf_h}, BT);
  // dlnf = dlogits wte needs wte; dwte += dlogits^T lnf does not, so it comes
  // after Done 0 (gpt.h): ZeRO-3 has freed the gathered wte before the whole
  // wte gradient is written. Same kernels and GEMMs as one matmul_backward.
  if (mixed)
    k_->matmul_backward_half(stream_, h, dlnf, nullptr, nullptr, a.logits, a.dout_h, lnf.h,
                             half_weight(params_.wte), BT, C, Vl, false);
  else
    k_->matmul_backward(stream_, dlnf, nullptr, nullptr, a.logits, lnf.f, params_.wte.data<float>(), BT, C,
                        Vl, false);
  // The head's input gradient is summed over tp while dwte is computed.
  PendingGradient dlnf_sum = start_reduce_input_grad(dlnf, BT);
  use_params(ParamEvent::Done, 0, true);
  use_params(ParamEvent::GradBegin, 0, true);
  if (frozen_ || defer_weight_grad(grads_.wte.data<float>(), a.logits, mixed ? a.dout_h : nullptr,
                                   lnf.f, lnf.h, BT, C, Vl))
    ;  // no embedding gradient, or the split backward's weight part computes it
  else if (mixed)  // dlogits as rounded into dout_h above (rounded once)
    k_->matmul_backward_weight_half(stream_, h, grads_.wte.data<float>(), a.dout_h, lnf.h, BT, C, Vl);
  else
    k_->matmul_backward(stream_, nullptr, grads_.wte.data<float>(), nullptr, a.logits, lnf.f, nullptr, BT, C,
                        Vl, false);
  use_params(ParamEvent::GradEnd, 0, true);
  // Residual-stream gradient starts at zero; layernorm backward accumulates.
  float* dres = a.dresidual;
  zero_floats(dres, Nl * C);
  const float* last = a.residual3 + (dims_.L - 1) * Nl * C;
  norm_backward(dres, grads_.lnfw, grads_.lnfb, dlnf_sum.get(), last, params_.lnfw, a.lnf_mean,
                a.lnf_rstd, Nl);
  use_params(ParamEvent::Done, fin, true);
  report_ready(total - 2 * C, total);
}

void GPT::backward_stage(const float* output_grad, float loss_scale) {
  MT_CHECK(acts_ && have_targets_, "backward() needs a forward() with targets first");
  MT_CHECK(dims_.heads || output_grad, "pipeline stage of layers {}-{}: backward needs the next "
           "stage's input gradient", dims_.layer0, dims_.layer0 + dims_.L - 1);
  GPTActivations& a = *acts_;
  // Recomputed activations must be the same floats: same kernels, same threads.
  MT_CHECK(recompute_.mode == Recompute::Mode::None || thread_count() == a.nthreads,
           "thread count changed from {} to {} between forward and backward; recompute = {} "
           "needs the forward's", a.nthreads, thread_count(), recompute_.name());
  const int64_t C = dims_.C;
  const int64_t BT = static_cast<int64_t>(B_) * T_, Nl = dims_.local_rows(BT);
  if (dims_.heads)
    head_backward(loss_scale);
  else
    k_->copy(stream_, a.dresidual, output_grad, Nl * C);  // the next stage's input gradient

  for (int l = dims_.L - 1; l >= 0; --l) {
    telemetry::TraceScope trace(telemetry::global_tracer(), "backward layer", dims_.layer0 + l, "compute");
    const int u = dims_.layer_unit(l);
    use_params(ParamEvent::Need, u, true);
    const float* residual = l == 0 ? a.encoded : a.residual3 + (l - 1) * Nl * C;
    const GPTBlockActivations& s = a.blocks[l];
    // Re-run what the policy did not keep, unless the scratch slot still
    // holds this block from forward (the last block that used it).
    if (recompute_.recomputes_block(l) && scratch_block_ != l) {
      telemetry::TraceScope rt(telemetry::global_tracer(), "recompute layer", dims_.layer0 + l, "compute");
      block_forward(l, residual, s, nullptr);
      scratch_block_ = l;
    } else if (recompute_.recomputes_attention() && scratch_block_ != l) {
      telemetry::TraceScope rt(telemetry::global_tracer(), "recompute attention", dims_.layer0 + l, "compute");
      attention_core_forward(s);
      scratch_block_ = l;
    }
    block_backward(l, residual, s);
    use_params(ParamEvent::Done, u, true);
    auto [b, e] = params_.layer_range(l);
    report_ready(b, e);
  }
  if (dims_.embeds) embed_backward();
  // wte (and wpe): the embedding's gradient (first stage) and the head's
  // (last) are both complete now.
  if (dims_.has_wte()) report_ready(0, params_.layer_range(0).first);
}

}  // namespace meshtrain
