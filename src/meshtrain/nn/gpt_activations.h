// Activation and backward-scratch buffers of a GPT for a fixed (B, T) and
// recompute policy, laid out up front in one allocation (tagged as
// activations). Only what the policy keeps for backward gets per-block
// storage; what backward recomputes goes to one shared scratch slot.
// Mixed precision (nn/precision.h) stores the activations that only feed GEMMs
// (ln1, ln2, fch_gelu, lnf) in 16 bits instead of f32; everything else stays
// f32 (residual stream, qkv, attention output and lse, fch, LayerNorm
// statistics, logits, losses, backward scratch).
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
  float* ln1 = nullptr;        // (B,T,C)
  float* ln1_mean = nullptr;   // (B,T)
  float* ln1_rstd = nullptr;   // (B,T)
  float* qkv = nullptr;        // (B,T,3C)
  float* atty = nullptr;       // (B,T,C)   attention core output
  float* att_lse = nullptr;    // (B,NH,T)  attention core log-sum-exp
  float* residual2 = nullptr;  // (B,T,C)
  float* ln2 = nullptr;        // (B,T,C)
  float* ln2_mean = nullptr;   // (B,T)
  float* ln2_rstd = nullptr;   // (B,T)
  float* fch = nullptr;        // (B,T,4C)
  float* fch_gelu = nullptr;   // (B,T,4C)
  // Mixed precision: these replace ln1, ln2 and fch_gelu (which stay null).
  uint16_t* ln1_h = nullptr;       // (B,T,C)
  uint16_t* ln2_h = nullptr;       // (B,T,C)
  uint16_t* fch_gelu_h = nullptr;  // (B,T,4C)
};

struct GPTActivations {
  int B = 0, T = 0, nthreads = 1;
  Recompute recompute;
  Precision precision = Precision::FP32;
  Tensor buffer;      // everything below points into it
  Tensor workspace;   // attention scratch, nthreads slices
  // The residual stream, kept under every policy: block 0's input and each
  // block's output (= the next block's input, the last one's feeds ln_f).
  float* encoded = nullptr;    // (B,T,C)
  float* residual3 = nullptr;  // (L,B,T,C)
  std::vector<GPTBlockActivations> blocks;  // per block, see GPTBlockActivations
  GPTBlockActivations scratch;  // the recompute slot (null parts: not needed)
  float* lnf = nullptr;        // (B,T,C)
  float* lnf_mean = nullptr;   // (B,T)
  float* lnf_rstd = nullptr;   // (B,T)
  float* logits = nullptr;     // (B,T,Vp)
  float* losses = nullptr;     // (B,T)
  // backward scratch
  float* dresidual = nullptr;  // (B,T,C)
  float* dbtc = nullptr;       // (B,T,C)
  float* dbt4c = nullptr;      // (B,T,4C), also holds dqkv (B,T,3C); mixed
                               // precision: also forward's f32 staging area
  // Mixed precision only: lnf in 16 bits (replaces lnf), the attention output
  // rounded for its GEMMs, and a GEMM's output gradient rounded for backward.
  uint16_t* lnf_h = nullptr;   // (B,T,C)
  uint16_t* atty_h = nullptr;  // (B,T,C)
  uint16_t* dout_h = nullptr;  // (B,T,max(4C,Vp))

  // Element counts (f32 units) of `buffer` and `workspace` for a config,
  // (B, T), policy and precision.
  static int64_t buffer_floats(const GPTConfig& cfg, int B, int T, const Recompute& recompute = {},
                               Precision precision = Precision::FP32);
  static int64_t workspace_floats(const GPTConfig& cfg, int T, int nthreads);
  GPTActivations() = default;
  GPTActivations(const GPTConfig& cfg, int B, int T, int nthreads, const Recompute& recompute = {},
                 Precision precision = Precision::FP32);
};

}  // namespace meshtrain
