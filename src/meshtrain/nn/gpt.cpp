#include "meshtrain/nn/gpt.h"
#include "meshtrain/nn/kv_decoders.h"

#include <cmath>
#include <limits>

#include "meshtrain/core/rng.h"
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
#include "meshtrain/telemetry/trace_writer.h"

namespace meshtrain {

using namespace cpu;

GPT::GPT(std::shared_ptr<const GPTSpec> spec, ModelBuffers buffers)
    : spec_(std::move(spec)), cfg_(spec_->config()) {
  ModelBuffers b = adopt_buffers(std::move(buffers), cfg_.num_params());
  param_buf_ = std::move(b.params);
  grad_buf_ = std::move(b.grads);
  k_ = &kernels_for(param_buf_.device());
  params_ = GPTParams::view(cfg_, param_buf_);
  grads_ = GPTParams::view(cfg_, grad_buf_);
}

GPT::GPT(const GPTConfig& cfg) : GPT(GPTSpec::make(cfg), ModelBuffers{}) {}

GPT::GPT(const GPTConfig& cfg, Tensor grad_buffer)
    : GPT(GPTSpec::make(cfg), ModelBuffers{Tensor(), std::move(grad_buffer), true}) {}

GPT::GPT(const GPTConfig& cfg, Tensor param_buffer, Tensor grad_buffer, bool zero_grads)
    : GPT(GPTSpec::make(cfg), ModelBuffers{std::move(param_buffer), std::move(grad_buffer), zero_grads}) {}

GPT::~GPT() = default;

void GPT::init_weights(uint64_t seed) {
  Rng rng(seed);
  const float std = 0.02f;
  const float resid_std = std / std::sqrt(2.0f * cfg_.n_layer);
  auto normal = [&](const Tensor& t, float s) {
    float* p = t.data<float>();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = s * rng.normal();
  };
  auto fill = [](const Tensor& t, float v) {
    float* p = t.data<float>();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = v;
  };
  param_buf_.zero_();
  // Real vocabulary rows only; padded rows stay zero.
  normal(params_.wte.slice_flat(0, static_cast<int64_t>(cfg_.vocab_size) * cfg_.n_embd), std);
  normal(params_.wpe, std);
  for (auto& l : params_.layers) {
    fill(l.ln1w, 1.f);
    fill(l.ln2w, 1.f);
    normal(l.qkvw, std);
    normal(l.attprojw, resid_std);
    normal(l.fcw, std);
    normal(l.fcprojw, resid_std);
  }
  fill(params_.lnfw, 1.f);
}

int64_t GPT::activation_bytes(const GPTConfig& cfg, int B, int T, const Recompute& recompute,
                              Precision precision) {
  return 4 * GPTActivations::buffer_floats(cfg, B, T, recompute, precision);
}

int64_t GPT::workspace_bytes(const GPTConfig& cfg, int T, int nthreads) {
  return 4 * GPTActivations::workspace_floats(cfg, T, nthreads);
}

void GPT::set_recompute(const Recompute& recompute) {
  check_recompute(recompute);
  if (recompute == recompute_) return;
  recompute_ = recompute;
  // The layout depends on the policy: drop it, and with it the last forward.
  acts_.reset();
  have_targets_ = false;
}

void GPT::set_precision(Precision p) {
  if (!half_.set_precision(p, cfg_.num_params())) return;
  // The activation layout depends on the precision: drop it and the last forward.
  acts_.reset();
  have_targets_ = false;
}

void GPT::use_external_half_copy(Tensor buffer) {
  half_.use_external(std::move(buffer), cfg_.num_params());
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
  acts_ = std::make_unique<GPTActivations>(cfg_, B, T, nt, recompute_, half_.precision());
}

const float* GPT::logits() const { return acts_ ? acts_->logits : nullptr; }
const float* GPT::losses() const { return acts_ ? acts_->losses : nullptr; }

void GPT::zero_grad() { grad_buf_.zero_(); }

// The one code path for a block's forward, used by forward and by backward's
// recompute, so recomputed activations are the same floats.
void GPT::attention_core_forward(const GPTBlockActivations& s) {
  const int64_t C = cfg_.n_embd, NH = cfg_.n_head;
  GPTActivations& a = *acts_;
  k_->attention_forward(s.atty, s.att_lse, s.qkv, B_, T_, C, NH, a.workspace.data<float>(), a.nthreads);
}

void GPT::block_forward(int l, const float* residual, const GPTBlockActivations& s,
                        float* residual3) {
  const int64_t C = cfg_.n_embd;
  const int64_t BT = static_cast<int64_t>(B_) * T_;
  const GPTLayerParams& p = params_.layers[l];
  if (half_.mixed()) return block_forward_half(l, residual, s, residual3);
  k_->layernorm_forward(s.ln1, s.ln1_mean, s.ln1_rstd, residual, p.ln1w.data<float>(),
                    p.ln1b.data<float>(), BT, C);
  k_->matmul_forward(s.qkv, s.ln1, p.qkvw.data<float>(), p.qkvb.data<float>(), BT, C, 3 * C, false);
  attention_core_forward(s);
  // residual2 = residual + atty @ Wproj^T + b (the add is fused into the GEMM)
  k_->copy(s.residual2, residual, BT * C);
  k_->matmul_forward(s.residual2, s.atty, p.attprojw.data<float>(), p.attprojb.data<float>(), BT, C,
                 C, /*accumulate=*/true);
  k_->layernorm_forward(s.ln2, s.ln2_mean, s.ln2_rstd, s.residual2, p.ln2w.data<float>(),
                    p.ln2b.data<float>(), BT, C);
  k_->matmul_forward(s.fch, s.ln2, p.fcw.data<float>(), p.fcb.data<float>(), BT, C, 4 * C, false);
  k_->gelu_forward(s.fch_gelu, s.fch, BT * 4 * C);
  // Backward never reads a block's own output, so its recompute stops here.
  if (!residual3) return;
  k_->copy(residual3, s.residual2, BT * C);
  k_->matmul_forward(residual3, s.fch_gelu, p.fcprojw.data<float>(), p.fcprojb.data<float>(), BT,
                 4 * C, C, /*accumulate=*/true);
}

// Mixed precision: the same block with 16-bit GEMM operands. LayerNorm and
// GELU compute in f32 into the staging area (dbt4c: unused by forward, and
// free when backward recomputes a block) and store their output rounded.
void GPT::block_forward_half(int l, const float* residual, const GPTBlockActivations& s,
                             float* residual3) {
  const int64_t C = cfg_.n_embd;
  const int64_t BT = static_cast<int64_t>(B_) * T_;
  const cpu::Half h = half_.format();
  const GPTLayerParams& p = params_.layers[l];
  float* stage = acts_->dbt4c;
  k_->layernorm_forward(stage, s.ln1_mean, s.ln1_rstd, residual, p.ln1w.data<float>(),
                    p.ln1b.data<float>(), BT, C);
  k_->to_half(h, stage, s.ln1_h, BT * C);
  k_->matmul_forward_half(h, s.qkv, s.ln1_h, half_weight(p.qkvw), p.qkvb.data<float>(), BT, C, 3 * C, false);
  attention_core_forward(s);
  k_->to_half(h, s.atty, acts_->atty_h, BT * C);
  k_->copy(s.residual2, residual, BT * C);
  k_->matmul_forward_half(h, s.residual2, acts_->atty_h, half_weight(p.attprojw),
                      p.attprojb.data<float>(), BT, C, C, /*accumulate=*/true);
  k_->layernorm_forward(stage, s.ln2_mean, s.ln2_rstd, s.residual2, p.ln2w.data<float>(),
                    p.ln2b.data<float>(), BT, C);
  k_->to_half(h, stage, s.ln2_h, BT * C);
  k_->matmul_forward_half(h, s.fch, s.ln2_h, half_weight(p.fcw), p.fcb.data<float>(), BT, C, 4 * C, false);
  k_->gelu_forward(stage, s.fch, BT * 4 * C);
  k_->to_half(h, stage, s.fch_gelu_h, BT * 4 * C);
  if (!residual3) return;
  k_->copy(residual3, s.residual2, BT * C);
  k_->matmul_forward_half(h, residual3, s.fch_gelu_h, half_weight(p.fcprojw), p.fcprojb.data<float>(),
                      BT, 4 * C, C, /*accumulate=*/true);
}

float GPT::forward(const int32_t* inputs, const int32_t* targets, int B, int T) {
  MT_CHECK(B >= 1, "batch size must be >= 1 (got {})", B);
  MT_CHECK(T >= 1 && T <= cfg_.seq_len,
           "sequence length {} is outside [1, {}] (the model's context, model.seq_len)", T,
           cfg_.seq_len);
  const int64_t C = cfg_.n_embd, V = cfg_.vocab_size, Vp = cfg_.padded_vocab;
  const int64_t BT = static_cast<int64_t>(B) * T;
  for (int64_t i = 0; i < BT; ++i) {
    MT_CHECK(inputs[i] >= 0 && inputs[i] < V, "token id {} at batch {} position {} is outside the "
             "vocabulary [0, {})", inputs[i], i / T, i % T, V);
    if (targets)
      MT_CHECK(targets[i] < V, "target id {} at batch {} position {} is outside the vocabulary "
               "[0, {})", targets[i], i / T, i % T, V);
  }
  ensure_activations(B, T);
  GPTActivations& a = *acts_;
  scratch_block_ = -1;
  // The activation buffers are laid out for (B, T); strides below use them.
  B_ = B;
  T_ = T;
  inputs_copy_.assign(inputs, inputs + BT);
  if (targets) targets_copy_.assign(targets, targets + BT);
  have_targets_ = targets != nullptr;

  const int L = cfg_.n_layer;
  use_params(ParamEvent::Need, 0, false);
  if (half_.mixed()) {
    // The token embedding is read from the 16-bit copy (rounded like every
    // other weight the model computes with), so ZeRO needs no f32 wte.
    refresh_half_weights(0);
    const cpu::Half h = half_.format();
    const uint16_t* wte_h = half_weight(params_.wte);
    const float* wpe = params_.wpe.data<float>();
    float* enc = a.encoded;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < BT; ++i) {
      float* o = enc + i * C;
      k_->from_half(h, wte_h + static_cast<int64_t>(inputs[i]) * C, o, C);
      const float* p = wpe + (i % T) * C;
      for (int64_t c = 0; c < C; ++c) o[c] += p[c];
    }
  } else {
    k_->encoder_forward(a.encoded, inputs, params_.wte.data<float>(), params_.wpe.data<float>(), B, T,
                    C);
  }
  use_params(ParamEvent::Done, 0, false);
  for (int l = 0; l < L; ++l) {
    telemetry::TraceScope trace(telemetry::global_tracer(), "forward layer", l, "compute");
    use_params(ParamEvent::Need, 1 + l, false);
    refresh_half_weights(1 + l);
    const float* residual = l == 0 ? a.encoded : a.residual3 + (l - 1) * BT * C;
    block_forward(l, residual, a.blocks[l], a.residual3 + l * BT * C);
    if (recompute_.recomputes_block(l) || recompute_.recomputes_attention()) scratch_block_ = l;
    use_params(ParamEvent::Done, 1 + l, false);
  }
  const float* last = a.residual3 + (cfg_.n_layer - 1) * BT * C;
  use_params(ParamEvent::Need, L + 1, false);
  const bool mixed = half_.mixed();
  k_->layernorm_forward(mixed ? a.dbt4c : a.lnf, a.lnf_mean, a.lnf_rstd, last,
                    params_.lnfw.data<float>(), params_.lnfb.data<float>(), BT, C);
  if (mixed) k_->to_half(half_.format(), a.dbt4c, a.lnf_h, BT * C);
  use_params(ParamEvent::Need, 0, false);
  if (mixed) {  // wte's 16-bit copy is current since the embedding lookup
    k_->matmul_forward_half(half_.format(), a.logits, a.lnf_h, half_weight(params_.wte), nullptr,
                        BT, C, Vp, false);
  } else {
    k_->matmul_forward(a.logits, a.lnf, params_.wte.data<float>(), nullptr, BT, C, Vp, false);
  }
  use_params(ParamEvent::Done, 0, false);
  use_params(ParamEvent::Done, L + 1, false);
  if (!targets) return std::numeric_limits<float>::quiet_NaN();

  const int64_t counted = k_->softmax_cross_entropy_forward(a.losses, a.logits, targets, BT, V, Vp);
  MT_CHECK(counted > 0, "every target in the batch is ignored (< 0); nothing to learn from");
  double sum = 0.0;
  for (int64_t i = 0; i < BT; ++i) sum += a.losses[i];
  mean_loss_ = static_cast<float>(sum / counted);
  counted_ = counted;
  return mean_loss_;
}

void GPT::backward(float loss_scale) {
  MT_CHECK(acts_ && have_targets_, "backward() needs a forward() with targets first");
  GPTActivations& a = *acts_;
  // Recomputed activations must be the same floats: same kernels, same threads.
  MT_CHECK(recompute_.mode == Recompute::Mode::None || thread_count() == a.nthreads,
           "thread count changed from {} to {} between forward and backward; recompute = {} "
           "needs the forward's", a.nthreads, thread_count(), recompute_.name());
  const int B = B_, T = T_;
  const int64_t C = cfg_.n_embd, NH = cfg_.n_head, V = cfg_.vocab_size, Vp = cfg_.padded_vocab;
  const int64_t BT = static_cast<int64_t>(B) * T;
  const int32_t* targets = targets_copy_.data();
  const int64_t total = cfg_.num_params();

  const int L = cfg_.n_layer;
  // Classifier: logits -> dlogits in place, then through the tied embedding.
  use_params(ParamEvent::Need, 0, true);
  use_params(ParamEvent::Need, L + 1, true);
  k_->softmax_cross_entropy_backward(a.logits, targets, loss_scale / static_cast<float>(counted_), BT,
                                 V, Vp);
  float* dlnf = a.dbtc;
  const bool mixed = half_.mixed();
  const cpu::Half h = half_.format();
  // dlnf = dlogits wte needs wte; dwte += dlogits^T lnf does not, so it comes
  // after Done 0 (gpt.h): ZeRO-3 has freed the gathered wte before the whole
  // wte gradient is written. Same kernels and GEMMs as one matmul_backward.
  if (mixed)
    k_->matmul_backward_half(h, dlnf, nullptr, nullptr, a.logits, a.dout_h, a.lnf_h,
                         half_weight(params_.wte), BT, C, Vp, false);
  else
    k_->matmul_backward(dlnf, nullptr, nullptr, a.logits, a.lnf, params_.wte.data<float>(), BT, C, Vp, false);
  use_params(ParamEvent::Done, 0, true);
  use_params(ParamEvent::GradBegin, 0, true);
  if (mixed)  // dlogits as rounded into dout_h above (rounded once)
    k_->matmul_backward_weight_half(h, grads_.wte.data<float>(), a.dout_h, a.lnf_h, BT, C, Vp);
  else
    k_->matmul_backward(nullptr, grads_.wte.data<float>(), nullptr, a.logits, a.lnf, nullptr, BT, C,
                    Vp, false);
  use_params(ParamEvent::GradEnd, 0, true);
  // Residual-stream gradient starts at zero; layernorm backward accumulates.
  float* dres = a.dresidual;
  std::fill(dres, dres + BT * C, 0.f);
  const float* last = a.residual3 + (cfg_.n_layer - 1) * BT * C;
  k_->layernorm_backward(dres, grads_.lnfw.data<float>(), grads_.lnfb.data<float>(), dlnf, last,
                     params_.lnfw.data<float>(), a.lnf_mean, a.lnf_rstd, BT, C);
  use_params(ParamEvent::Done, L + 1, true);
  if (grad_ready_hook_) grad_ready_hook_(total - 2 * C, total);

  for (int l = cfg_.n_layer - 1; l >= 0; --l) {
    telemetry::TraceScope trace(telemetry::global_tracer(), "backward layer", l, "compute");
    use_params(ParamEvent::Need, 1 + l, true);
    const GPTLayerParams& p = params_.layers[l];
    GPTLayerParams& g = grads_.layers[l];
    const float* residual = l == 0 ? a.encoded : a.residual3 + (l - 1) * BT * C;
    const GPTBlockActivations& s = a.blocks[l];
    // Re-run what the policy did not keep, unless the scratch slot still
    // holds this block from forward (the last block that used it).
    if (recompute_.recomputes_block(l) && scratch_block_ != l) {
      telemetry::TraceScope rt(telemetry::global_tracer(), "recompute layer", l, "compute");
      block_forward(l, residual, s, nullptr);
      scratch_block_ = l;
    } else if (recompute_.recomputes_attention() && scratch_block_ != l) {
      telemetry::TraceScope rt(telemetry::global_tracer(), "recompute attention", l, "compute");
      attention_core_forward(s);
      scratch_block_ = l;
    }
    const float* ln1 = s.ln1;
    const float* qkv = s.qkv;
    const float* atty = s.atty;
    const float* residual2 = s.residual2;
    const float* ln2 = s.ln2;
    const float* fch = s.fch;
    const float* fch_gelu = s.fch_gelu;
    float* dbt4c = a.dbt4c;
    float* dbtc = a.dbtc;

    if (mixed) {
      block_backward_half(l, residual, s, g);
      use_params(ParamEvent::Done, 1 + l, true);
      if (grad_ready_hook_) {
        auto [b, e] = params_.layer_range(l);
        grad_ready_hook_(b, e);
      }
      continue;
    }
    // MLP: residual3 = residual2 + fcproj(gelu(fc(ln2(residual2))))
    k_->matmul_backward(dbt4c, g.fcprojw.data<float>(), g.fcprojb.data<float>(), dres, fch_gelu,
                    p.fcprojw.data<float>(), BT, 4 * C, C, false);
    k_->gelu_backward(dbt4c, fch, dbt4c, BT * 4 * C);
    k_->matmul_backward(dbtc, g.fcw.data<float>(), g.fcb.data<float>(), dbt4c, ln2,
                    p.fcw.data<float>(), BT, C, 4 * C, false);
    k_->layernorm_backward(dres, g.ln2w.data<float>(), g.ln2b.data<float>(), dbtc, residual2,
                       p.ln2w.data<float>(), s.ln2_mean, s.ln2_rstd, BT, C);
    // Attention: residual2 = residual + attproj(attn(qkv(ln1(residual))))
    k_->matmul_backward(dbtc, g.attprojw.data<float>(), g.attprojb.data<float>(), dres, atty,
                    p.attprojw.data<float>(), BT, C, C, false);
    float* dqkv = dbt4c;
    k_->attention_backward(dqkv, dbtc, qkv, atty, s.att_lse, B, T, C, NH,
                       a.workspace.data<float>(), a.nthreads);
    k_->matmul_backward(dbtc, g.qkvw.data<float>(), g.qkvb.data<float>(), dqkv, ln1,
                    p.qkvw.data<float>(), BT, C, 3 * C, false);
    k_->layernorm_backward(dres, g.ln1w.data<float>(), g.ln1b.data<float>(), dbtc, residual,
                       p.ln1w.data<float>(), s.ln1_mean, s.ln1_rstd, BT, C);
    use_params(ParamEvent::Done, 1 + l, true);
    if (grad_ready_hook_) {
      auto [b, e] = params_.layer_range(l);
      grad_ready_hook_(b, e);
    }
  }
  k_->encoder_backward(grads_.wte.data<float>(), grads_.wpe.data<float>(), dres, inputs_copy_.data(),
                   B, T, C);
  if (grad_ready_hook_) {
    auto [b, e] = params_.layer_range(0);
    grad_ready_hook_(0, b);
  }
}

}  // namespace meshtrain

namespace meshtrain {

// Mixed precision backward of block l (after any recompute): every GEMM's
// output gradient is rounded once into dout_h; weight gradients accumulate
// in f32; GELU, attention and LayerNorm backward run in f32 as in fp32.
void GPT::block_backward_half(int l, const float* residual, const GPTBlockActivations& s,
                              GPTLayerParams& g) {
  GPTActivations& a = *acts_;
  const int64_t C = cfg_.n_embd, NH = cfg_.n_head;
  const int64_t BT = static_cast<int64_t>(B_) * T_;
  const cpu::Half h = half_.format();
  const GPTLayerParams& p = params_.layers[l];
  float* dres = a.dresidual;
  float* dbt4c = a.dbt4c;
  float* dbtc = a.dbtc;
  k_->matmul_backward_half(h, dbt4c, g.fcprojw.data<float>(), g.fcprojb.data<float>(), dres, a.dout_h,
                       s.fch_gelu_h, half_weight(p.fcprojw), BT, 4 * C, C, false);
  k_->gelu_backward(dbt4c, s.fch, dbt4c, BT * 4 * C);
  k_->matmul_backward_half(h, dbtc, g.fcw.data<float>(), g.fcb.data<float>(), dbt4c, a.dout_h, s.ln2_h,
                       half_weight(p.fcw), BT, C, 4 * C, false);
  k_->layernorm_backward(dres, g.ln2w.data<float>(), g.ln2b.data<float>(), dbtc, s.residual2,
                     p.ln2w.data<float>(), s.ln2_mean, s.ln2_rstd, BT, C);
  k_->to_half(h, s.atty, a.atty_h, BT * C);  // the attention output as its GEMM saw it
  k_->matmul_backward_half(h, dbtc, g.attprojw.data<float>(), g.attprojb.data<float>(), dres, a.dout_h,
                       a.atty_h, half_weight(p.attprojw), BT, C, C, false);
  float* dqkv = dbt4c;
  k_->attention_backward(dqkv, dbtc, s.qkv, s.atty, s.att_lse, B_, T_, C, NH, a.workspace.data<float>(),
                     a.nthreads);
  k_->matmul_backward_half(h, dbtc, g.qkvw.data<float>(), g.qkvb.data<float>(), dqkv, a.dout_h, s.ln1_h,
                       half_weight(p.qkvw), BT, C, 3 * C, false);
  k_->layernorm_backward(dres, g.ln1w.data<float>(), g.ln1b.data<float>(), dbtc, residual,
                     p.ln1w.data<float>(), s.ln1_mean, s.ln1_rstd, BT, C);
}

}  // namespace meshtrain

namespace meshtrain {
std::unique_ptr<Decoder> GPT::make_decoder() const { return make_gpt_decoder(cfg_, param_buf_); }
}  // namespace meshtrain
