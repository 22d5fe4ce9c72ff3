#include "meshtrain/nn/llama_activations.h"

#include <algorithm>

#include "meshtrain/kernels/cpu/attention.h"

namespace meshtrain {

namespace {

// Lays the buffers out from `base` (null: only counts) and returns the floats used.
int64_t layout(LlamaActivations* a, float* base, const LlamaDims& d, int B, int T,
               const Recompute& rc, Precision prec) {
  const int64_t N = static_cast<int64_t>(B) * T, C = d.C, Q = d.Q, A = d.A;
  const int64_t H = d.H, L = d.L, NH = d.NH, Vl = d.Vl;
  const int64_t Nl = d.local_rows(N);  // rows of the residual stream kept here
  const bool gqa = d.gqa();
  int64_t at = 0;
  auto take = [&](int64_t n) -> float* {
    float* p = base ? base + at : nullptr;
    at += n;
    return p;
  };
  auto block = [&](LlamaBlockActivations& s, bool attention_core) {
    s.ln1 = take(Nl * C);
    s.ln1_rstd = take(Nl);
    s.qkv = take(N * Q);
    if (attention_core) {
      s.atty = take(N * A);
      s.att_lse = take(static_cast<int64_t>(B) * NH * T);
    }
    s.residual2 = take(Nl * C);
    s.ln2 = take(Nl * C);
    s.ln2_rstd = take(Nl);
    s.gate_up = take(N * 2 * H);
    s.act = take(N * H);
  };
  LlamaActivations dummy(d, 0, 0, 0, rc, prec);  // never allocates with B = 0
  LlamaActivations& x = a ? *a : dummy;
  x.encoded = take(Nl * C);
  x.residual = take(L * Nl * C);
  // One scratch slot for whatever the policy recomputes.
  LlamaBlockActivations scratch;
  const bool any_block = rc.mode == Recompute::Mode::Full || rc.mode == Recompute::Mode::EveryK;
  if (any_block) block(scratch, true);
  if (rc.recomputes_attention()) {
    scratch.atty = take(N * A);
    scratch.att_lse = take(static_cast<int64_t>(B) * NH * T);
  }
  x.blocks.assign(static_cast<size_t>(L), {});
  for (int64_t l = 0; l < L; ++l) {
    LlamaBlockActivations& s = x.blocks[l];
    if (rc.recomputes_block(static_cast<int>(l))) {
      s = scratch;
    } else {
      block(s, !rc.recomputes_attention());
      if (rc.recomputes_attention()) s.atty = scratch.atty, s.att_lse = scratch.att_lse;
    }
  }
  if (d.heads) {  // a pipeline stage before the last has no head
    x.lnf = take(Nl * C);
    x.lnf_rstd = take(Nl);
    x.logits = take(N * Vl);
    x.losses = take(N);
    if (d.tp_size > 1) {
      x.lse = take(N);
      x.loss_scratch = take(2 * N);
    }
  }
  x.dresidual = take(Nl * C);
  x.dbtc = take(N * C);
  if (d.sp) {
    x.gathered = take(N * C);
    x.gathered2 = take(N * C);
    x.dbtc_local = take(Nl * C);
    x.dnorm = take(C);
  }
  x.datty = take(N * A);
  x.dqkv = take(N * Q);
  x.dgate_up = take(N * 2 * H);
  x.dact = take(N * H);
  if (gqa) {
    x.qkv_full = take(N * 3 * A);
    x.dqkv_full = take(N * 3 * A);
  }
  if (is_mixed(prec)) {  // 16-bit elements, two per float
    x.in_h = reinterpret_cast<uint16_t*>(take((N * std::max({C, H, A}) + 1) / 2));
    x.dout_h = reinterpret_cast<uint16_t*>(take((N * std::max({Q, 2 * H, C, Vl}) + 1) / 2));
  }
  return at;
}

}  // namespace

int64_t LlamaActivations::buffer_floats(const LlamaDims& d, int B, int T, const Recompute& rc,
                                        Precision precision) {
  return layout(nullptr, nullptr, d, B, T, rc, precision);
}

int64_t LlamaActivations::workspace_floats(const LlamaDims& d, int T, int nthreads) {
  return static_cast<int64_t>(nthreads) * cpu::attention_workspace_floats(T, static_cast<int>(d.hd));
}

LlamaActivations::LlamaActivations(const LlamaDims& cfg, int B_, int T_, int nthreads_,
                                   const Recompute& rc, Precision prec, Device device)
    : B(B_), T(T_), nthreads(nthreads_), recompute(rc), precision(prec) {
  if (B == 0) return;
  buffer = Tensor::zeros({buffer_floats(cfg, B, T, rc, prec)}, DType::F32, MemCategory::Activations,
                         device);
  workspace = Tensor::zeros({workspace_floats(cfg, T, nthreads)}, DType::F32, MemCategory::Workspace,
                            device);
  layout(this, buffer.data<float>(), cfg, B, T, rc, prec);
}

}  // namespace meshtrain
