// Shape of a GPT-2-style model and the named presets.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace meshtrain {

// The most parameters a model may have (a limit far above any model that
// trains today, so that counts and offsets stay exact in 64 bits).
constexpr double kMaxModelParams = 1e15;

struct GPTConfig {
  int n_layer = 0;
  int n_head = 0;
  int n_embd = 0;       // C
  int seq_len = 0;      // maximum context T (rows of the position table)
  int vocab_size = 0;   // real vocabulary V
  int padded_vocab = 0; // V rounded up to a multiple of 64 (128 for large vocabularies)

  int head_dim() const { return n_embd / n_head; }
  // Parameters, including position embeddings (total in the flat buffer).
  int64_t num_params() const;
  // N of the FLOP convention: parameters excluding position embeddings.
  int64_t num_params_non_embedding_pos() const;
  // Model FLOPs per token for one training step (forward + backward):
  // 6*N + 6*L*C*T, with T the context used in training (see docs/ARCHITECTURE.md).
  double flops_per_token(int T) const;
  // Throws a meshtrain::Error naming the first inconsistent field.
  void validate() const;
  std::string describe() const;
};

struct ModelShard;

// The sizes one GPT instance computes with: the whole model, or one
// tensor-parallel shard, which holds n_head / tp heads (q, k and v each
// A = C / tp wide), 4C / tp of the MLP width and padded_vocab / tp rows of
// the tied embedding; C, the LayerNorms, the position table and the
// row-parallel biases are whole on every shard.
struct GPTDims {
  int64_t C = 0, hd = 0;
  int64_t NH = 0;          // heads held
  int64_t A = 0;           // attention width held: NH * hd (C for the whole model)
  int64_t F = 0;           // MLP width held (4C for the whole model)
  int64_t Vl = 0;          // vocabulary rows held (the tied embedding and head)
  int64_t v_begin = 0;     // first of them
  int64_t V = 0, Vp = 0;   // the real and padded vocabulary (whole model)
  int64_t T = 0;           // rows of the position table
  int L = 0, tp_rank = 0, tp_size = 1;
  bool sp = false;  // sequence parallelism: the C-wide rows split over tp
  // Pipeline stage: the layers held are [layer0, layer0 + L) of the model's
  // n_layer; the first stage embeds (wte, wpe), the last holds ln_f and the
  // tied head (its own copy of wte, whose gradient the stages add up).
  int layer0 = 0, n_layer = 0;
  bool embeds = true, heads = true;
  bool has_wte() const { return embeds || heads; }
  // Parameter units: 0 = wte (with wpe on the first stage) when held, then
  // one per layer, then ln_f on the last stage.
  int layer_unit(int l) const { return (has_wte() ? 1 : 0) + l; }
  int final_unit() const { return layer_unit(L); }
  // Rows of an N-row micro-batch this instance keeps of the residual stream.
  int64_t local_rows(int64_t N) const { return sp ? N / tp_size : N; }
  // Elements of the flat parameter buffer.
  int64_t num_params() const;
  // Throws a clear error naming the numbers when the shape cannot be split.
  static GPTDims make(const GPTConfig& cfg, const ModelShard& shard);
};

// Round V up: to 128 when V > 1024 (GPT-2: 50257 -> 50304), else to 64.
int pad_vocab(int vocab_size);

// Named presets: gpt2, gpt2-medium, gpt2-large, gpt2-xl, char-6L/4L/2L,
// gpt-wide (tensor-parallel benchmarks), tiny.
GPTConfig gpt_preset(const std::string& name);
std::vector<std::string> gpt_preset_names();

}  // namespace meshtrain
