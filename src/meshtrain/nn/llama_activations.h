// Activation and backward-scratch buffers of a Llama model for a fixed
// (B, T) and recompute policy, laid out up front in one allocation (tagged
// as activations). What the policy keeps for backward gets per-block
// storage; what backward recomputes goes to one shared scratch slot.
// Mixed precision keeps these f32 and adds two 16-bit staging buffers: each
// GEMM's input is rounded into `in_h` right before the GEMM (forward, and
// again in backward, so both see the same 16-bit values) and its output
// gradient into `dout_h`.
#pragma once
#include <cstdint>
#include <vector>

#include "meshtrain/core/tensor.h"
#include "meshtrain/nn/llama_config.h"
#include "meshtrain/nn/precision.h"
#include "meshtrain/nn/recompute.h"

namespace meshtrain {

struct LlamaBlockActivations {
  // Widths (C, Q, A, H, Vl) are those of LlamaDims: the whole model's or a
  // tensor-parallel shard's. Rows: N = B * T, or Nl = N / tp for the residual
  // stream and the norms under sequence parallelism.
  float* ln1 = nullptr;        // (Nl, C)  input RMSNorm output
  float* ln1_rstd = nullptr;   // (Nl)
  float* qkv = nullptr;        // (N, Q)  q|k|v after the rotary embedding (LlamaDims)
  float* atty = nullptr;       // (N, A)  attention core output
  float* att_lse = nullptr;    // (B, NH, T)
  float* residual2 = nullptr;  // (Nl, C)
  float* ln2 = nullptr;        // (Nl, C)
  float* ln2_rstd = nullptr;   // (Nl)
  float* gate_up = nullptr;    // (N, 2H)
  float* act = nullptr;        // (N, H)  silu(gate) * up
};

struct LlamaActivations {
  int B = 0, T = 0, nthreads = 0;
  Recompute recompute;
  Precision precision = Precision::FP32;
  Tensor buffer, workspace;
  float* encoded = nullptr;   // (Nl, C) token embeddings
  float* residual = nullptr;  // (L, Nl, C) each block's output
  std::vector<LlamaBlockActivations> blocks;
  float* lnf = nullptr;       // (Nl, C)
  float* lnf_rstd = nullptr;  // (Nl)
  float* logits = nullptr;    // (N, Vl); dlogits after backward
  float* losses = nullptr;    // (N)
  float* lse = nullptr;       // (N)  tp > 1: each row's log-sum-exp (vocabulary-parallel loss)
  float* loss_scratch = nullptr;  // (2N)  tp > 1
  // Backward scratch, and the full-head q|k|v of grouped-query attention.
  float* dresidual = nullptr;  // (Nl, C)
  float* dbtc = nullptr;       // (N, C)  a C-wide input gradient (tp: this shard's partial sum)
  // Sequence parallelism: two N-row gather buffers (a norm's output, or an
  // output gradient, for a tensor-parallel GEMM), the reduce-scattered input
  // gradient, and a norm gain's per-step gradient before it is summed over tp.
  float* gathered = nullptr;    // (N, C)
  float* gathered2 = nullptr;   // (N, C)
  float* dbtc_local = nullptr;  // (Nl, C)
  float* dnorm = nullptr;       // (C)
  float* datty = nullptr;      // (N, A)
  float* dqkv = nullptr;       // (N, Q)
  float* dgate_up = nullptr;   // (N, 2H)
  float* dact = nullptr;       // (N, H)
  float* qkv_full = nullptr;   // (N, 3A)  GQA only: k, v repeated per query head
  float* dqkv_full = nullptr;  // (N, 3A)  GQA only
  uint16_t* in_h = nullptr;    // (N, max(C, H, A))  mixed precision: a GEMM's input
  uint16_t* dout_h = nullptr;  // (N, max(Q, 2H, C, Vl))  mixed: a GEMM's output gradient

  // The buffers live on `device` (the model's).
  LlamaActivations(const LlamaDims& dims, int B, int T, int nthreads, const Recompute& rc,
                   Precision precision, Device device = Device::cpu());
  // Floats of `buffer` and `workspace` for these arguments (what the
  // allocator will count).
  static int64_t buffer_floats(const LlamaDims& dims, int B, int T, const Recompute& rc,
                               Precision precision);
  static int64_t workspace_floats(const LlamaDims& dims, int T, int nthreads);
};

}  // namespace meshtrain
