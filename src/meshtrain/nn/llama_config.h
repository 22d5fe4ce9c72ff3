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

struct ModelShard;

// The sizes one Llama instance computes with: the whole model, or one
// tensor-parallel shard, which holds n_head / tp query heads, n_kv_head / tp
// KV heads, ffn_hidden / tp of the SwiGLU width and padded_vocab / tp rows of
// the embedding and the head; C and the norms are whole on every shard.
struct LlamaDims {
  int64_t C = 0, hd = 0;
  int64_t NH = 0, NKV = 0;  // heads held
  int64_t A = 0;            // q width held: NH * hd (C for the whole model)
  int64_t KV = 0;           // k (and v) width held: NKV * hd
  int64_t Q = 0;            // A + 2 KV: the stacked q|k|v output per token
  int64_t H = 0;            // SwiGLU width held
  int64_t Vl = 0;           // vocabulary rows held (embedding, head)
  int64_t v_begin = 0;      // first of them
  int64_t V = 0, Vp = 0;    // the real and padded vocabulary (whole model)
  int L = 0, tp_rank = 0, tp_size = 1;
  bool sp = false;  // sequence parallelism: the C-wide rows split over tp
  // Pipeline stage: layers [layer0, layer0 + L) of the model's; the first
  // stage embeds, the last holds the final norm and lm_head (untied).
  int layer0 = 0;
  bool embeds = true, heads = true;
  // Parameter units: 0 = the embedding (first stage), one per layer, then
  // the final norm with lm_head (last stage).
  int layer_unit(int l) const { return (embeds ? 1 : 0) + l; }
  int final_unit() const { return layer_unit(L); }
  bool gqa() const { return NKV != NH; }
  // Rows of an N-row micro-batch this instance keeps of the residual stream.
  int64_t local_rows(int64_t N) const { return sp ? N / tp_size : N; }
  // Throws a clear error naming the numbers when the shape cannot be split.
  static LlamaDims make(const LlamaConfig& cfg, const ModelShard& shard);
};

// llama-tiny (tests), llama-char (CPU demo size), llama-wide (tensor-parallel
// benchmarks), llama-100m (benchmarks),
// llama-3.2-1b and llama-3-8b (the published shapes, for planning).
LlamaConfig llama_preset(const std::string& name);
std::vector<std::string> llama_preset_names();

}  // namespace meshtrain
