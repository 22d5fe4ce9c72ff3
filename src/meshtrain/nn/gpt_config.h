// Shape of a GPT-2-style model and the named presets.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace meshtrain {

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

// Round V up: to 128 when V > 1024 (GPT-2: 50257 -> 50304), else to 64.
int pad_vocab(int vocab_size);

// Named presets: gpt2, gpt2-medium, gpt2-large, gpt2-xl, char-6L, tiny.
GPTConfig gpt_preset(const std::string& name);
std::vector<std::string> gpt_preset_names();

}  // namespace meshtrain
