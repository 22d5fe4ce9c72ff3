// Activation and backward-scratch buffers of a GPT for a fixed (B, T) and
// recompute policy, laid out up front in one allocation (tagged as
// activations). Only what the policy keeps for backward gets per-block
// storage; what backward recomputes goes to one shared scratch slot.
// Mixed precision (nn/precision.h) stores the activations that only feed GEMMs
// (ln1, ln2, fch_gelu, lnf) in 16 bits instead of f32; everything else stays
// f32 (residual stream, qkv, attention output and lse, fch, LayerNorm
// statistics, logits, losses, backward scratch).
//
// A tensor-parallel shard (GPTDims) keeps its heads' qkv (3A wide), its MLP
// slice (F wide) and its vocabulary columns of the logits; under sequence
// parallelism the C-wide rows (residual stream, LayerNorms) are its N / tp
// rows only, and gather buffers hold all N rows for the GEMMs.
#pragma once
#include <cstdint>
#include <vector>

#include "meshtrain/core/tensor.h"
#include "meshtrain/nn/gpt_config.h"
#include "meshtrain/nn/precision.h"
#include "meshtrain/nn/recompute.h"

namespace meshtrain {

// One block's intermediate activations. For a block kept whole these point
// into its own storage; parts a policy recomputes point into the shared
// scratch slot (GPTActivations::scratch), which holds one block's worth.
struct GPTBlockActivations {
  // Nl = the rows kept (N = B x T, or N / tp under sequence parallelism).
  float* ln1 = nullptr;        // (Nl,C)
  float* ln1_mean = nullptr;   // (Nl)
  float* ln1_rstd = nullptr;   // (Nl)
  float* qkv = nullptr;        // (N,3A)
  float* atty = nullptr;       // (N,A)     attention core output
  float* att_lse = nullptr;    // (B,NH,T)  attention core log-sum-exp
  float* residual2 = nullptr;  // (Nl,C)
  float* ln2 = nullptr;        // (Nl,C)
  float* ln2_mean = nullptr;   // (Nl)
  float* ln2_rstd = nullptr;   // (Nl)
  float* fch = nullptr;        // (N,F)
  float* fch_gelu = nullptr;   // (N,F)
  // Mixed precision: these replace ln1, ln2 and fch_gelu (which stay null).
  uint16_t* ln1_h = nullptr;       // (Nl,C)
  uint16_t* ln2_h = nullptr;       // (Nl,C)
  uint16_t* fch_gelu_h = nullptr;  // (N,F)
};

struct GPTActivations {
  int B = 0, T = 0, nthreads = 1;
  Recompute recompute;
  Precision precision = Precision::FP32;
  Tensor buffer;      // everything below points into it
  Tensor workspace;   // attention scratch, nthreads slices
  // The residual stream, kept under every policy: block 0's input and each
  // block's output (= the next block's input, the last one's feeds ln_f).
  float* encoded = nullptr;    // (Nl,C)
  float* residual3 = nullptr;  // (L,Nl,C)
  std::vector<GPTBlockActivations> blocks;  // per block, see GPTBlockActivations
  GPTBlockActivations scratch;  // the recompute slot (null parts: not needed)
  float* lnf = nullptr;        // (Nl,C)
  float* lnf_mean = nullptr;   // (Nl)
  float* lnf_rstd = nullptr;   // (Nl)
  float* logits = nullptr;     // (N,Vl)
  float* losses = nullptr;     // (N)
  float* lse = nullptr;          // tp > 1: (N) each row's log-sum-exp (vocabulary-parallel loss)
  float* loss_scratch = nullptr; // tp > 1: (2N)
  // backward scratch
  float* dresidual = nullptr;  // (Nl,C)
  float* dbtc = nullptr;       // (N,C); forward: a row-parallel GEMM's partial sums
  float* dbt4c = nullptr;      // (N,F), also holds dqkv (N,3A); mixed
                               // precision: also forward's f32 staging area
  // Sequence parallelism only: all N rows of a C-wide activation (f32, or
  // the 16-bit LayerNorm outputs under mixed precision) for a GEMM, all N
  // rows of the residual gradient, this rank's rows of a reduced input
  // gradient, and one step's LayerNorm parameter gradients (2C).
  float* gathered = nullptr;     // (N,C), fp32 only
  uint16_t* gathered_h = nullptr;  // (N,C), mixed precision only
  float* gathered2 = nullptr;    // (N,C)
  float* dbtc_local = nullptr;   // (Nl,C)
  float* dnorm = nullptr;        // (2C)
  // Mixed precision only: lnf in 16 bits (replaces lnf), the attention output
  // rounded for its GEMMs, and a GEMM's output gradient rounded for backward.
  uint16_t* lnf_h = nullptr;   // (Nl,C)
  uint16_t* atty_h = nullptr;  // (N,A)
  uint16_t* dout_h = nullptr;  // (N,max(C,3A,F,Vl))

  // Element counts (f32 units) of `buffer` and `workspace` for a shape,
  // (B, T), policy and precision.
  static int64_t buffer_floats(const GPTDims& d, int B, int T, const Recompute& recompute = {},
                               Precision precision = Precision::FP32);
  static int64_t workspace_floats(const GPTDims& d, int T, int nthreads);
  GPTActivations() = default;
  // The buffers live on `device` (the model's).
  GPTActivations(const GPTDims& d, int B, int T, int nthreads, const Recompute& recompute = {},
                 Precision precision = Precision::FP32, Device device = Device::cpu());
};

}  // namespace meshtrain
