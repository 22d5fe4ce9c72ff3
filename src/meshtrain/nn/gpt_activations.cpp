#include "meshtrain/nn/gpt_activations.h"

#include <algorithm>

#include "meshtrain/kernels/cpu/attention.h"

namespace meshtrain {

namespace {
// Walks the layout once; with a == nullptr it only counts. Both the
// allocation and GPT::activation_bytes use this walk, so the prediction is
// exact by construction.
int64_t layout(GPTActivations* a, float* base, const GPTDims& d, int B, int T,
               const Recompute& rc, Precision prec) {
  const bool half = is_mixed(prec);
  const int64_t C = d.C, L = d.L, NH = d.NH, A = d.A, F = d.F, Vl = d.Vl;
  const int64_t BT = static_cast<int64_t>(B) * T;
  const int64_t Nl = d.local_rows(BT);  // rows of the residual stream kept here
  int64_t off = 0;
  auto take = [&](float*& p, int64_t n) {
    if (a) p = base + off;
    // Keep every buffer 64-byte aligned.
    off += (n + 15) / 16 * 16;
  };
  // 16-bit buffers take half as many f32 slots (rounded up, same alignment).
  auto take_h = [&](uint16_t*& p, int64_t n) {
    if (a) p = reinterpret_cast<uint16_t*>(base + off);
    off += ((n + 1) / 2 + 15) / 16 * 16;
  };
  GPTActivations dummy_holder;
  GPTActivations* t = a ? a : &dummy_holder;
  t->blocks.assign(static_cast<size_t>(L), GPTBlockActivations{});
  // Storage for the parts of a block; the attention core's output and lse
  // are skipped when `with_attention_core` is false.
  auto take_block = [&](GPTBlockActivations& s, bool with_attention_core) {
    if (half)
      take_h(s.ln1_h, Nl * C);
    else
      take(s.ln1, Nl * C);
    take(s.ln1_mean, Nl);
    take(s.ln1_rstd, Nl);
    take(s.qkv, BT * 3 * A);
    if (with_attention_core) {
      take(s.atty, BT * A);
      take(s.att_lse, B * NH * T);
    }
    take(s.residual2, Nl * C);
    if (half)
      take_h(s.ln2_h, Nl * C);
    else
      take(s.ln2, Nl * C);
    take(s.ln2_mean, Nl);
    take(s.ln2_rstd, Nl);
    take(s.fch, BT * F);
    if (half)
      take_h(s.fch_gelu_h, BT * F);
    else
      take(s.fch_gelu, BT * F);
  };
  take(t->encoded, Nl * C);
  take(t->residual3, L * Nl * C);
  bool any_block_recomputed = false;
  for (int l = 0; l < L; ++l) {
    if (rc.recomputes_block(l))
      any_block_recomputed = true;
    else
      take_block(t->blocks[l], !rc.recomputes_attention());
  }
  t->scratch = GPTBlockActivations{};
  if (any_block_recomputed) {
    take_block(t->scratch, true);
  } else if (rc.recomputes_attention()) {
    take(t->scratch.atty, BT * A);
    take(t->scratch.att_lse, B * NH * T);
  }
  for (int l = 0; l < L; ++l) {
    GPTBlockActivations& s = t->blocks[l];
    if (rc.recomputes_block(l)) {
      s = t->scratch;
    } else if (rc.recomputes_attention()) {
      s.atty = t->scratch.atty;
      s.att_lse = t->scratch.att_lse;
    }
  }
  if (d.heads) {  // a pipeline stage before the last has no head
    if (half)
      take_h(t->lnf_h, Nl * C);
    else
      take(t->lnf, Nl * C);
    take(t->lnf_mean, Nl);
    take(t->lnf_rstd, Nl);
    take(t->logits, BT * Vl);
    take(t->losses, BT);
    if (d.tp_size > 1) {
      take(t->lse, BT);
      take(t->loss_scratch, 2 * BT);
    }
  }
  take(t->dresidual, Nl * C);
  take(t->dbtc, BT * C);
  take(t->dbt4c, BT * F);
  if (d.sp) {
    if (half)
      take_h(t->gathered_h, BT * C);
    else
      take(t->gathered, BT * C);
    take(t->gathered2, BT * C);
    take(t->dbtc_local, Nl * C);
    take(t->dnorm, 2 * C);
  }
  if (half) {
    take_h(t->atty_h, BT * A);
    take_h(t->dout_h, BT * std::max({C, 3 * A, F, d.heads ? Vl : C}));
  }
  return off;
}
}  // namespace

int64_t GPTActivations::buffer_floats(const GPTDims& d, int B, int T, const Recompute& rc,
                                      Precision prec) {
  return layout(nullptr, nullptr, d, B, T, rc, prec);
}

int64_t GPTActivations::workspace_floats(const GPTDims& d, int T, int nthreads) {
  return static_cast<int64_t>(nthreads) * cpu::attention_workspace_floats(T, d.hd);
}

GPTActivations::GPTActivations(const GPTDims& d, int B_, int T_, int nthreads_,
                               const Recompute& rc, Precision prec, Device device)
    : B(B_), T(T_), nthreads(nthreads_), recompute(rc), precision(prec) {
  buffer = Tensor::zeros({buffer_floats(d, B, T, rc, prec)}, DType::F32, MemCategory::Activations,
                         device);
  workspace = Tensor::zeros({workspace_floats(d, T, nthreads)}, DType::F32, MemCategory::Workspace,
                            device);
  layout(this, buffer.data<float>(), d, B, T, rc, prec);
}

}  // namespace meshtrain
