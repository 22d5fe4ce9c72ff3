// Activation and backward-scratch buffers of a GPT for a fixed (B, T), laid
// out up front in one allocation (tagged as activations).
#pragma once
#include <cstdint>

#include "meshtrain/core/tensor.h"
#include "meshtrain/nn/gpt_config.h"

namespace meshtrain {

struct GPTActivations {
  int B = 0, T = 0, nthreads = 1;
  Tensor buffer;      // everything below points into it
  Tensor workspace;   // attention scratch, nthreads slices
  float* encoded = nullptr;     // (B,T,C)
  float* ln1;         // (L,B,T,C)
  float* ln1_mean;    // (L,B,T)
  float* ln1_rstd;    // (L,B,T)
  float* qkv;         // (L,B,T,3C)
  float* atty;        // (L,B,T,C)
  float* att_lse;     // (L,B,NH,T)
  float* residual2;   // (L,B,T,C)
  float* ln2;         // (L,B,T,C)
  float* ln2_mean;    // (L,B,T)
  float* ln2_rstd;    // (L,B,T)
  float* fch;         // (L,B,T,4C)
  float* fch_gelu;    // (L,B,T,4C)
  float* residual3;   // (L,B,T,C)
  float* lnf;         // (B,T,C)
  float* lnf_mean;    // (B,T)
  float* lnf_rstd;    // (B,T)
  float* logits;      // (B,T,Vp)
  float* losses;      // (B,T)
  // backward scratch
  float* dresidual;   // (B,T,C)
  float* dbtc;        // (B,T,C)
  float* dbt4c;       // (B,T,4C), also holds dqkv (B,T,3C)

  // Element counts of `buffer` and `workspace` for a config and (B, T).
  static int64_t buffer_floats(const GPTConfig& cfg, int B, int T);
  static int64_t workspace_floats(const GPTConfig& cfg, int T, int nthreads);
  GPTActivations() = default;
  GPTActivations(const GPTConfig& cfg, int B, int T, int nthreads);
};

}  // namespace meshtrain
