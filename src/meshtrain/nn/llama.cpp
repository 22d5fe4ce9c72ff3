#include "meshtrain/nn/llama.h"

#include <cstring>
#include <limits>

#include "meshtrain/core/error.h"
#include "meshtrain/core/threads.h"
#include "meshtrain/kernels/cpu/attention.h"
#include "meshtrain/kernels/cpu/convert.h"
#include "meshtrain/kernels/cpu/elementwise.h"
#include "meshtrain/kernels/cpu/matmul.h"
#include "meshtrain/kernels/cpu/matmul_half.h"
#include "meshtrain/kernels/cpu/rmsnorm.h"
#include "meshtrain/kernels/cpu/softmax_cross_entropy.h"
#include "meshtrain/kernels/cpu/swiglu.h"
#include "meshtrain/nn/llama_activations.h"
#include "meshtrain/nn/vocab_parallel_loss.h"
#include "meshtrain/telemetry/trace_writer.h"

namespace meshtrain {

using namespace cpu;

Llama::Llama(std::shared_ptr<const LlamaSpec> spec, ModelBuffers b)
    : spec_(std::move(spec)), cfg_(spec_->config()), dims_(spec_->dims()) {
  b = adopt_buffers(std::move(b), spec_->layout().numel);
  params_ = std::move(b.params);
  grads_ = std::move(b.grads);
  k_ = &kernels_for(params_.device());
  stream_ = default_stream(params_.device());
  // The rotary angles where the kernels read them, on every device alike
  // (counted as workspace: LlamaSpec::memory).
  RopeTable table = rope_table(cfg_.seq_len, cfg_.head_dim(), cfg_.rope_theta, cfg_.rope_scaling);
  const int64_t n = static_cast<int64_t>(table.cos.size());
  rope_angles_ = Tensor::zeros({2 * n}, DType::F32, MemCategory::Workspace, params_.device());
  auto host = [n](std::vector<float>& v) {
    return Tensor(Storage::borrow(v.data(), sizeof(float) * static_cast<size_t>(n)), 0, {n},
                  DType::F32);
  };
  rope_angles_.slice_flat(0, n).copy_from(host(table.cos));
  rope_angles_.slice_flat(n, n).copy_from(host(table.sin));
  rope_view_ = {rope_angles_.data<float>(), rope_angles_.data<float>() + n, table.T, table.half};
}

Llama::~Llama() = default;

void Llama::init_weights(uint64_t seed) {
  fill_params_from_host(params_, [&](float* p) {
    spec_->initial_weights(seed, {0, spec_->num_params()}, p);
  });
}

void Llama::release_activations() {
  acts_.reset();
  parked_.clear();
  release_deferred();
}

void Llama::switch_slot(int from, int to) {
  parked_.resize(static_cast<size_t>(slots_));
  SlotState<LlamaActivations>& f = parked_[static_cast<size_t>(from)];
  f.acts = std::move(acts_);
  f.B = B_, f.T = T_, f.counted = counted_, f.have_targets = have_targets_;
  SlotState<LlamaActivations>& t = parked_[static_cast<size_t>(to)];
  acts_ = std::move(t.acts);
  B_ = t.B, T_ = t.T, counted_ = t.counted, have_targets_ = t.have_targets;
}

void Llama::freeze(std::shared_ptr<LinearAdapters> adapters) {
  MT_CHECK(dims_.tp_size == 1, "a tensor-parallel llama shard cannot be frozen under adapters");
  frozen_ = true;
  adapters_ = std::move(adapters);
  half_.freeze();  // the 16-bit copy is rounded once
  frozen_gain_grad_.assign(static_cast<size_t>(dims_.C), 0.f);
}

void Llama::row_parallel_forward(float* out, const float* residual, const float* inp,
                                 int64_t w_offset, int64_t N, int64_t K) {
  const int64_t C = dims_.C;
  if (dims_.sp) {
    // The partial sums of all N rows, reduce-scattered: this rank's rows,
    // then the residual (its rows too).
    float* partial = acts_->dbtc;  // free in forward
    linear_forward(partial, inp, w_offset, N, K, C);
    const int64_t Nl = dims_.local_rows(N);
    tp_->reduce_scatter(partial, out, Nl * C);
    k_->add_inplace(stream_, out, residual, Nl * C);
    return;
  }
  if (dims_.tp_size == 1 || dims_.tp_rank == 0) {
    k_->copy(stream_, out, residual, N * C);  // the residual is added once, by tp rank 0
    linear_forward(out, inp, w_offset, N, K, C, /*accumulate=*/true);
  } else {
    linear_forward(out, inp, w_offset, N, K, C);
  }
  if (dims_.tp_size > 1) tp_->allreduce_sum(out, N * C);
}

PendingGradient Llama::start_reduce_input_grad(float* dinp, int64_t N) {
  const int64_t C = dims_.C;
  if (dims_.sp)
    return {acts_->dbtc_local, tp_->start_reduce_scatter(dinp, acts_->dbtc_local, dims_.local_rows(N) * C)};
  if (dims_.tp_size > 1) return {dinp, tp_->start_allreduce_sum(dinp, N * C)};
  return {dinp, nullptr};
}

PendingGradient Llama::column_parallel_backward(float* dinp, int64_t w_offset, const float* dout,
                                                const float* inp, int64_t N, int64_t C, int64_t OC) {
  if (dims_.tp_size == 1) {  // nothing to overlap: one fused call
    linear_backward(dinp, w_offset, dout, inp, N, C, OC);
    return {dinp, nullptr};
  }
  linear_backward(dinp, w_offset, dout, nullptr, N, C, OC);
  PendingGradient sum = start_reduce_input_grad(dinp, N);
  linear_backward(nullptr, w_offset, dout, inp, N, C, OC);
  return sum;
}

const float* Llama::gather_rows(const float* local, float* full, int64_t N) {
  if (!dims_.sp) return local;
  tp_->allgather(local, full, dims_.local_rows(N) * dims_.C);
  return full;
}

void Llama::norm_backward(float* dinp, int64_t gain, const float* dout, const float* inp,
                          const float* rstd, int64_t rows) {
  const int64_t C = dims_.C;
  if (frozen_)
    return k_->rmsnorm_backward(stream_, dinp, frozen_gain_grad_.data(), dout, inp, w(gain), rstd, rows, C);
  if (!dims_.sp) return k_->rmsnorm_backward(stream_, dinp, g(gain), dout, inp, w(gain), rstd, rows, C);
  // Each rank saw its rows only: this step's gain gradient is summed over tp
  // before it joins what earlier micro-batches accumulated.
  float* dg = acts_->dnorm;
  zero_floats(dg, C);
  k_->rmsnorm_backward(stream_, dinp, dg, dout, inp, w(gain), rstd, rows, C);
  tp_->allreduce_sum(dg, C);
  k_->add_inplace(stream_, g(gain), dg, C);
}

void Llama::linear_forward(float* out, const float* inp, int64_t w_offset, int64_t N, int64_t C,
                           int64_t OC, bool accumulate) {
  if (!half_.mixed()) {
    k_->matmul_forward(stream_, out, inp, w(w_offset), nullptr, N, C, OC, accumulate);
    if (adapters_) adapters_->forward(w_offset, out, {inp, nullptr}, N, C, OC);
    return;
  }
  const Half h = half_.format();
  k_->to_half(stream_, h, inp, acts_->in_h, N * C);
  k_->matmul_forward_half(stream_, h, out, acts_->in_h, hw(w_offset), nullptr, N, C, OC, accumulate);
  if (adapters_) adapters_->forward(w_offset, out, {inp, acts_->in_h, h}, N, C, OC);
}

void Llama::linear_backward(float* dinp, int64_t w_offset, const float* dout, const float* inp,
                            int64_t N, int64_t C, int64_t OC) {
  // Frozen: no weight gradient; the adapters (if any) take theirs after the
  // frozen input gradient.
  float* dw = inp && !frozen_ ? g(w_offset) : nullptr;
  // A split backward (zb-h1) queues the weight product for its weight part.
  if (defer_weight_grad(dw, dout, nullptr, inp, nullptr, N, C, OC)) {
    if (!dinp) return;
    dw = nullptr, inp = nullptr;
  }
  if (!half_.mixed()) {
    k_->matmul_backward(stream_, dinp, dw, nullptr, dout, inp, dinp ? w(w_offset) : nullptr, N, C, OC, false);
    if (adapters_ && inp) adapters_->backward(w_offset, dinp, dout, {inp, nullptr}, N, C, OC);
    return;
  }
  const Half h = half_.format();
  // The same 16-bit values the forward GEMM saw.
  if (inp) k_->to_half(stream_, h, inp, acts_->in_h, N * C);
  k_->matmul_backward_half(stream_, h, dinp, dw, nullptr, dout, acts_->dout_h, acts_->in_h,
                           dinp ? hw(w_offset) : nullptr, N, C, OC, false);
  if (adapters_ && inp) adapters_->backward(w_offset, dinp, dout, {inp, acts_->in_h, h}, N, C, OC);
}

void Llama::ensure_activations(int B, int T) {
  const int nt = thread_count();
  if (acts_ && acts_->B == B && acts_->T == T && acts_->nthreads == nt &&
      acts_->recompute == recompute_ && acts_->precision == half_.precision())
    return;
  acts_.reset();  // free first so peak memory holds one layout
  acts_ = std::make_unique<LlamaActivations>(dims_, B, T, nt, recompute_, half_.precision(),
                                             params_.device());
}

const float* Llama::logits() const { return acts_ ? acts_->logits : nullptr; }

void Llama::ready(int unit) {
  const ParamUnit& u = spec_->layout().units[unit];
  report_ready(u.begin, u.end);
}

void Llama::expand_kv(const float* qkv, float* full) const {
  k_->expand_kv_heads(stream_, full, qkv, static_cast<int64_t>(B_) * T_, dims_.NH, dims_.NKV,
                      dims_.hd);
}

void Llama::fold_kv(const float* dfull, float* dqkv) const {
  k_->fold_kv_heads(stream_, dqkv, dfull, static_cast<int64_t>(B_) * T_, dims_.NH, dims_.NKV,
                    dims_.hd);
}

void Llama::attention_core_forward(const LlamaBlockActivations& s) {
  LlamaActivations& a = *acts_;
  const float* qkv = s.qkv;
  if (dims_.gqa()) {
    expand_kv(s.qkv, a.qkv_full);
    qkv = a.qkv_full;
  }
  attention_forward(s.atty, s.att_lse, qkv, B_, T_, dims_.A, dims_.NH, a.workspace.data<float>(),
                    a.nthreads);
}

void Llama::block_forward(int l, const float* input, const LlamaBlockActivations& s, float* output) {
  const int64_t N = static_cast<int64_t>(B_) * T_, C = dims_.C, Q = dims_.Q, A = dims_.A;
  const int64_t H = dims_.H;
  const LlamaSpec::LayerOffsets& o = spec_->layer(l);
  const int64_t Nl = dims_.local_rows(N);
  k_->rmsnorm_forward(stream_, s.ln1, s.ln1_rstd, input, w(o.ln1), Nl, C, cfg_.norm_eps);
  linear_forward(s.qkv, gather_rows(s.ln1, acts_->gathered, N), o.qkv, N, C, Q);
  k_->rope_forward(stream_, s.qkv, B_, T_, static_cast<int>(dims_.NH), static_cast<int>(dims_.hd), Q, rope_view_);
  k_->rope_forward(stream_, s.qkv + A, B_, T_, static_cast<int>(dims_.NKV), static_cast<int>(dims_.hd), Q, rope_view_);
  attention_core_forward(s);
  row_parallel_forward(s.residual2, input, s.atty, o.o, N, A);
  k_->rmsnorm_forward(stream_, s.ln2, s.ln2_rstd, s.residual2, w(o.ln2), Nl, C, cfg_.norm_eps);
  linear_forward(s.gate_up, gather_rows(s.ln2, acts_->gathered, N), o.gate_up, N, C, 2 * H);
  k_->swiglu_forward(stream_, s.act, s.gate_up, N, H);
  if (!output) return;  // backward never reads a block's own output
  row_parallel_forward(output, s.residual2, s.act, o.down, N, H);
}

float Llama::forward_stage(const MicroBatch& b, const float* input) {
  MT_CHECK(b.B >= 1, "batch size must be >= 1 (got {})", b.B);
  MT_CHECK(b.T >= 1 && b.T <= cfg_.seq_len,
           "sequence length {} is outside [1, {}] (the model's context, model.seq_len)", b.T,
           cfg_.seq_len);
  MT_CHECK(dims_.tp_size == 1 || tp_, "a tensor-parallel llama shard needs its tp group "
           "(set_tensor_parallel_group) before forward");
  const int64_t N = static_cast<int64_t>(b.B) * b.T, C = dims_.C;
  MT_CHECK(!dims_.sp || N % dims_.tp_size == 0, "sequence parallelism splits the micro-batch's "
           "{} x {} = {} tokens over tp = {}: make batch x seq_len a multiple of {}", b.B, b.T, N,
           dims_.tp_size, dims_.tp_size);
  MT_CHECK(dims_.embeds ? b.inputs != nullptr : input != nullptr, "pipeline stage of layers "
           "{}-{}: forward needs {}", dims_.layer0, dims_.layer0 + dims_.L - 1,
           dims_.embeds ? "the token ids" : "the previous stage's output");
  const int64_t Nl = dims_.local_rows(N);
  const int64_t V = cfg_.vocab_size, Vl = dims_.Vl, v0 = dims_.v_begin;
  for (int64_t i = 0; i < N; ++i) {
    if (dims_.embeds)
      MT_CHECK(b.inputs[i] >= 0 && b.inputs[i] < V, "token id {} at batch {} position {} is "
               "outside the vocabulary [0, {})", b.inputs[i], i / b.T, i % b.T, V);
    if (b.targets && dims_.heads)
      MT_CHECK(b.targets[i] < V, "target id {} at batch {} position {} is outside the vocabulary "
               "[0, {})", b.targets[i], i / b.T, i % b.T, V);
  }
  ensure_activations(b.B, b.T);
  LlamaActivations& a = *acts_;
  B_ = b.B;
  T_ = b.T;
  // The ids in the model's memory from here on.
  const int32_t* targets = b.targets && dims_.heads ? stage_ids(1, b.targets, N) : nullptr;
  have_targets_ = targets != nullptr || !dims_.heads;
  const int L = dims_.L;
  if (dims_.embeds) {
    const int32_t* inputs = stage_ids(0, b.inputs, N);
    use_params(ParamEvent::Need, 0, false);
    half_.refresh(spec_->layout(), 0, w(0), *k_);
    // The rows this shard holds ([v0, v0 + Vl): all of them without tp); a
    // token elsewhere is another shard's, summed in by the allreduce.
    const bool mixed = half_.mixed();
    const Half h = half_.format();
    const uint16_t* emb_h = mixed ? hw(spec_->embed_offset()) : nullptr;
    const float* emb = w(spec_->embed_offset());
    // Sequence parallelism: all N rows' partial lookups, reduce-scattered.
    float* looked_up = dims_.sp ? a.gathered : a.encoded;
    // Mixed: the 16-bit copy, rounded like every weight the model computes with.
    k_->embedding_lookup(stream_, looked_up, inputs, emb, emb_h, h, v0, Vl, N, C);
    if (dims_.sp)
      tp_->reduce_scatter(looked_up, a.encoded, dims_.local_rows(N) * C);
    else if (dims_.tp_size > 1)
      tp_->allreduce_sum(a.encoded, N * C);
    use_params(ParamEvent::Done, 0, false);
  } else {
    k_->copy(stream_, a.encoded, input, Nl * C);  // the previous stage's output
  }
  for (int l = 0; l < L; ++l) {
    telemetry::TraceScope trace(telemetry::global_tracer(), "forward layer", dims_.layer0 + l, "compute");
    const int u = dims_.layer_unit(l);
    use_params(ParamEvent::Need, u, false);
    half_.refresh(spec_->layout(), u, w(0), *k_);
    const float* in = l == 0 ? a.encoded : a.residual + (l - 1) * Nl * C;
    block_forward(l, in, a.blocks[l], a.residual + l * Nl * C);
    use_params(ParamEvent::Done, u, false);
  }
  if (!dims_.heads) return std::numeric_limits<float>::quiet_NaN();
  const int fin = dims_.final_unit();
  use_params(ParamEvent::Need, fin, false);
  half_.refresh(spec_->layout(), fin, w(0), *k_);
  const float* last = a.residual + (L - 1) * Nl * C;
  k_->rmsnorm_forward(stream_, a.lnf, a.lnf_rstd, last, w(spec_->norm_offset()), Nl, C, cfg_.norm_eps);
  linear_forward(a.logits, gather_rows(a.lnf, a.gathered, N), spec_->head_offset(), N, C, Vl);
  use_params(ParamEvent::Done, fin, false);
  if (!targets) return std::numeric_limits<float>::quiet_NaN();
  if (dims_.tp_size == 1)
    counted_ = k_->softmax_cross_entropy_forward(stream_, a.losses, a.logits, targets, N, V, Vl);
  else
    counted_ = vocab_parallel_cross_entropy_forward(*k_, stream_, a.losses, a.lse, a.loss_scratch, a.logits,
                                                    targets, N, {v0, Vl, V}, *tp_);
  // Every target ignored (a masked micro-batch of prompts only): loss 0,
  // and backward adds nothing (nn/model.h).
  const double sum = sum_floats(a.losses, N);
  return counted_ > 0 ? static_cast<float>(sum / counted_) : 0.f;
}

const float* Llama::stage_output() const {
  if (!acts_ || dims_.heads) return nullptr;
  const int64_t Nl = dims_.local_rows(static_cast<int64_t>(B_) * T_);
  return acts_->residual + (dims_.L - 1) * Nl * dims_.C;
}

const float* Llama::stage_input_grad() const {
  return acts_ && !dims_.embeds ? acts_->dresidual : nullptr;
}

void Llama::block_backward(int l, const float* input, const LlamaBlockActivations& s) {
  LlamaActivations& a = *acts_;
  const int64_t N = static_cast<int64_t>(B_) * T_, C = dims_.C, Q = dims_.Q, A = dims_.A;
  const int64_t H = dims_.H;
  const int NH = static_cast<int>(dims_.NH), NKV = static_cast<int>(dims_.NKV);
  const int hd = static_cast<int>(dims_.hd);
  const LlamaSpec::LayerOffsets& o = spec_->layer(l);
  float* dres = a.dresidual;  // this rank's rows (all N without sequence parallelism)
  const int64_t Nl = dims_.local_rows(N);
  // MLP: out = residual2 + act Wdown^T, act = swiglu(ln2 Wgu^T), ln2 = RMSNorm(residual2).
  linear_backward(a.dact, o.down, gather_rows(dres, a.gathered2, N), s.act, N, H, C);
  k_->swiglu_backward(stream_, a.dgate_up, a.dact, s.gate_up, N, H);
  PendingGradient dln2 = column_parallel_backward(a.dbtc, o.gate_up, a.dgate_up,
                                                  gather_rows(s.ln2, a.gathered, N), N, C, 2 * H);
  norm_backward(dres, o.ln2, dln2.get(), s.residual2, s.ln2_rstd, Nl);
  // Attention: residual2 = input + atty Wo^T.
  linear_backward(a.datty, o.o, gather_rows(dres, a.gathered2, N), s.atty, N, A, C);
  if (dims_.gqa()) {
    expand_kv(s.qkv, a.qkv_full);  // the scratch may hold another block's
    attention_backward(a.dqkv_full, a.datty, a.qkv_full, s.atty, s.att_lse, B_, T_, A, NH,
                       a.workspace.data<float>(), a.nthreads);
    fold_kv(a.dqkv_full, a.dqkv);
  } else {
    attention_backward(a.dqkv, a.datty, s.qkv, s.atty, s.att_lse, B_, T_, A, NH,
                       a.workspace.data<float>(), a.nthreads);
  }
  k_->rope_backward(stream_, a.dqkv, B_, T_, NH, hd, Q, rope_view_);
  k_->rope_backward(stream_, a.dqkv + A, B_, T_, NKV, hd, Q, rope_view_);
  PendingGradient dln1 =
      column_parallel_backward(a.dbtc, o.qkv, a.dqkv, gather_rows(s.ln1, a.gathered, N), N, C, Q);
  norm_backward(dres, o.ln1, dln1.get(), input, s.ln1_rstd, Nl);
}

void Llama::head_backward(float loss_scale) {
  LlamaActivations& a = *acts_;
  const int64_t N = static_cast<int64_t>(B_) * T_, C = dims_.C;
  const int64_t V = cfg_.vocab_size, Vl = dims_.Vl, v0 = dims_.v_begin;
  const int fin = dims_.final_unit();
  // Head: logits -> dlogits in place, through lm_head and the final norm.
  use_params(ParamEvent::Need, fin, true);
  const float dloss = counted_ > 0 ? loss_scale / static_cast<float>(counted_) : 0.f;
  if (dims_.tp_size == 1)
    k_->softmax_cross_entropy_backward(stream_, a.logits, staged_ids(1), dloss, N, V, Vl);
  else
    vocab_parallel_cross_entropy_backward(*k_, stream_, a.logits, a.lse, staged_ids(1), dloss, N, {v0, Vl, V});
  const int64_t Nl = dims_.local_rows(N);
  PendingGradient dlnf = column_parallel_backward(a.dbtc, spec_->head_offset(), a.logits,
                                                  gather_rows(a.lnf, a.gathered, N), N, C, Vl);
  zero_floats(a.dresidual, Nl * C);
  const float* last = a.residual + (dims_.L - 1) * Nl * C;
  norm_backward(a.dresidual, spec_->norm_offset(), dlnf.get(), last, a.lnf_rstd, Nl);
  use_params(ParamEvent::Done, fin, true);
  ready(fin);
}

void Llama::backward_stage(const float* output_grad, float loss_scale) {
  MT_CHECK(acts_ && have_targets_, "backward() needs a forward() with targets first");
  MT_CHECK(dims_.heads || output_grad, "pipeline stage of layers {}-{}: backward needs the next "
           "stage's input gradient", dims_.layer0, dims_.layer0 + dims_.L - 1);
  LlamaActivations& a = *acts_;
  MT_CHECK(recompute_.mode == Recompute::Mode::None || thread_count() == a.nthreads,
           "thread count changed from {} to {} between forward and backward; recompute = {} "
           "needs the forward's", a.nthreads, thread_count(), recompute_.name());
  const int64_t N = static_cast<int64_t>(B_) * T_, C = dims_.C;
  const int64_t Vl = dims_.Vl, v0 = dims_.v_begin;
  const int64_t Nl = dims_.local_rows(N);
  if (dims_.heads)
    head_backward(loss_scale);
  else
    k_->copy(stream_, a.dresidual, output_grad, Nl * C);  // the next stage's input gradient
  for (int l = dims_.L - 1; l >= 0; --l) {
    telemetry::TraceScope trace(telemetry::global_tracer(), "backward layer", dims_.layer0 + l, "compute");
    const int u = dims_.layer_unit(l);
    use_params(ParamEvent::Need, u, true);
    const float* input = l == 0 ? a.encoded : a.residual + (l - 1) * Nl * C;
    const LlamaBlockActivations& s = a.blocks[l];
    // Re-run what the policy did not keep (same kernels and threads: same floats).
    if (recompute_.recomputes_block(l)) {
      telemetry::TraceScope rt(telemetry::global_tracer(), "recompute layer", dims_.layer0 + l, "compute");
      block_forward(l, input, s, nullptr);
    } else if (recompute_.recomputes_attention()) {
      telemetry::TraceScope rt(telemetry::global_tracer(), "recompute attention", dims_.layer0 + l, "compute");
      attention_core_forward(s);
    }
    block_backward(l, input, s);
    use_params(ParamEvent::Done, u, true);
    ready(u);
  }
  // Embedding lookup: rows of the batch's tokens, in position order
  // (deterministic). It reads no parameters, so there is no Need/Done (ZeRO-3
  // does not gather the embedding for it); the grad-ready hook reports it.
  if (frozen_ || !dims_.embeds) return;
  float* demb = g(spec_->embed_offset());
  const float* dencoded = gather_rows(a.dresidual, a.gathered2, N);  // every token's gradient
  k_->embedding_accumulate(stream_, demb, dencoded, staged_ids(0), v0, Vl, N, C);
  ready(0);
}
}  // namespace meshtrain
