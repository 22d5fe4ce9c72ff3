#include "meshtrain/nn/gpt_activations.h"

#include "meshtrain/kernels/cpu/attention.h"

namespace meshtrain {

namespace {
// Walks the layout once; with base == nullptr it only counts.
int64_t layout(GPTActivations* a, float* base, const GPTConfig& cfg, int B, int T) {
  const int64_t C = cfg.n_embd, L = cfg.n_layer, NH = cfg.n_head, Vp = cfg.padded_vocab;
  const int64_t BT = static_cast<int64_t>(B) * T;
  int64_t off = 0;
  auto take = [&](float*& p, int64_t n) {
    if (a) p = base + off;
    // Keep every buffer 64-byte aligned.
    off += (n + 15) / 16 * 16;
  };
  GPTActivations dummy_holder;
  GPTActivations* t = a ? a : &dummy_holder;
  take(t->encoded, BT * C);
  take(t->ln1, L * BT * C);
  take(t->ln1_mean, L * BT);
  take(t->ln1_rstd, L * BT);
  take(t->qkv, L * BT * 3 * C);
  take(t->atty, L * BT * C);
  take(t->att_lse, L * B * NH * T);
  take(t->residual2, L * BT * C);
  take(t->ln2, L * BT * C);
  take(t->ln2_mean, L * BT);
  take(t->ln2_rstd, L * BT);
  take(t->fch, L * BT * 4 * C);
  take(t->fch_gelu, L * BT * 4 * C);
  take(t->residual3, L * BT * C);
  take(t->lnf, BT * C);
  take(t->lnf_mean, BT);
  take(t->lnf_rstd, BT);
  take(t->logits, BT * Vp);
  take(t->losses, BT);
  take(t->dresidual, BT * C);
  take(t->dbtc, BT * C);
  take(t->dbt4c, BT * 4 * C);
  return off;
}
}  // namespace

int64_t GPTActivations::buffer_floats(const GPTConfig& cfg, int B, int T) {
  return layout(nullptr, nullptr, cfg, B, T);
}

int64_t GPTActivations::workspace_floats(const GPTConfig& cfg, int T, int nthreads) {
  return static_cast<int64_t>(nthreads) * cpu::attention_workspace_floats(T, cfg.head_dim());
}

GPTActivations::GPTActivations(const GPTConfig& cfg, int B_, int T_, int nthreads_)
    : B(B_), T(T_), nthreads(nthreads_) {
  buffer = Tensor::zeros({buffer_floats(cfg, B, T)}, DType::F32, MemCategory::Activations);
  workspace = Tensor::zeros({workspace_floats(cfg, T, nthreads)}, DType::F32, MemCategory::Workspace);
  layout(this, buffer.data<float>(), cfg, B, T);
}

}  // namespace meshtrain
