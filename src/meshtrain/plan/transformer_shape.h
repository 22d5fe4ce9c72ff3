// The planner's view of a model: a decoder's shape, with no buffers (a 1T
// model is a few integers). Parameter counts follow the engine's layouts
// (GPT: nn/gpt_spec.h, tied embedding and head, learned positions, biases,
// LayerNorm; Llama: nn/llama_spec.h, untied head, RMSNorm, SwiGLU, GQA), so
// a planned model and a trained one count alike.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "meshtrain/plan/memory_formulas.h"

namespace meshtrain::plan {

struct TransformerShape {
  std::string name;
  bool llama = false;  // Llama-style (SwiGLU, RMSNorm, RoPE, untied head) vs GPT-2 style
  int64_t layers = 0, hidden = 0, heads = 0, kv_heads = 0, ffn = 0, vocab = 0, seq = 0;

  int64_t params() const;
  // The token embedding, and the output head when it is its own matrix.
  int64_t embedding_params() const;
  // Model FLOPs per token of one training step (forward + backward, no
  // recompute): 6 per parameter a GEMM reads (the tied GPT embedding once,
  // as the head) and causal attention's 6 x L x seq x hidden (scores and
  // context, forward and backward, half the square) -- meshtrain's convention
  // (docs/ARCHITECTURE.md).
  double flops_per_token(int64_t seq_len) const;
  // Extra FLOPs per token a recompute policy adds: full re-runs each layer's
  // forward, selective its attention core.
  double recompute_flops_per_token(int64_t seq_len, RecomputePolicy policy) const;
  // "L24 h2304 a24 V51200 s2048: 1.65B parameters".
  std::string describe() const;
  // Throws a clear error for a non-positive dimension, heads not dividing
  // hidden, or kv_heads not dividing heads.
  void validate() const;
};

// The shape of an engine model from its description (ModelSpec::to_json:
// families gpt and llama; the padded vocabulary, which the head computes).
// Null for a family the planner does not model (LoRA adapters).
std::optional<TransformerShape> shape_from_description(const nlohmann::json& description);

// Narayanan et al. 2021, Eq. 2: a GPT's parameters with biases and learned
// positions, 12 l h^2 (1 + 13 / (12 h) + (V + s) / (12 l h)).
double narayanan_params(int64_t layers, int64_t hidden, int64_t vocab, int64_t seq);

// Named shapes: the engine's presets (gpt2..., llama-...) and published
// sizes (GPT-3's table, Narayanan et al.'s Table 1 rows as gpt-1.7b ...
// gpt-1t, gpt-100b). Null when unknown.
std::optional<TransformerShape> shape_preset(const std::string& name);
std::vector<std::string> shape_preset_names();

}  // namespace meshtrain::plan
