// GPT shapes and parameter tweaks the model tests share.
#pragma once
#include <cstdint>
#include <string>

#include "meshtrain/core/rng.h"
#include "meshtrain/nn/gpt.h"
#include "random_tokens.h"

namespace meshtrain::testing {

// 3 layers, 3 heads of 8, a vocabulary that needs padding.
inline GPTConfig odd_gpt_shape() {
  GPTConfig c;
  c.n_layer = 3;
  c.n_head = 3;
  c.n_embd = 24;
  c.seq_len = 16;
  c.vocab_size = 37;
  c.padded_vocab = pad_vocab(c.vocab_size);
  c.validate();
  return c;
}

// Random small biases and gains (zero and one after init) so every gradient
// path is non-trivial.
inline void perturb_biases_and_gains(GPT& m, uint64_t seed) {
  Rng r(seed);
  for (auto& [name, t] : m.params().named()) {
    if (name.find("bias") != std::string::npos || name.find("ln_") != std::string::npos) {
      float* p = t.data<float>();
      for (int64_t i = 0; i < t.numel(); ++i) p[i] += 0.1f * r.normal();
    }
  }
}

}  // namespace meshtrain::testing
