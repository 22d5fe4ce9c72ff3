// Shape of a Llama-style decoder (RMSNorm, SwiGLU MLP, rotary embeddings,
// grouped-query attention, untied input/output embeddings, no biases) and
// its named presets.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "meshtrain/kernels/cpu/rope.h"

namespace meshtrain {

struct LlamaConfig {
  int n_layer = 0;
  int n_head = 0;
  int n_kv_head = 0;     // grouped-query attention: n_head % n_kv_head == 0
  int n_embd = 0;        // C
  int ffn_hidden = 0;    // H: the SwiGLU width (intermediate_size)
  int seq_len = 0;       // maximum context T
  int vocab_size = 0;    // real vocabulary V
  int padded_vocab = 0;  // V rounded up (pad_vocab)
  double rope_theta = 10000.0;
  cpu::RopeScaling rope_scaling;  // factor 0: none
  float norm_eps = 1e-5f;

  int head_dim() const { return n_embd / n_head; }
  int kv_dim() const { return n_kv_head * head_dim(); }
  // Elements of the stacked [q; k; v] projection's output per token.
  int64_t qkv_width() const { return static_cast<int64_t>(n_embd) + 2 * kv_dim(); }
  int64_t layer_params() const;
  int64_t num_params() const;
  // Model FLOPs per token of a training step: 6 * N + 6 * L * C * T, with N
  // the parameters that take part in matrix multiplies (all but the token
  // embedding, a lookup; the output head counts), the attention term as
  // GPT's (docs/ARCHITECTURE.md).
  double flops_per_token(int T) const;
  void validate() const;
  std::string describe() const;
};

// llama-tiny (tests), llama-char (CPU demo size), llama-100m (benchmarks),
// llama-3.2-1b and llama-3-8b (the published shapes, for planning).
LlamaConfig llama_preset(const std::string& name);
std::vector<std::string> llama_preset_names();

}  // namespace meshtrain
