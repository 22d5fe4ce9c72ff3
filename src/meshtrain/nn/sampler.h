// Autoregressive text generation from a token model (temperature and top-k sampling).
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "meshtrain/core/rng.h"
#include "meshtrain/nn/model.h"

namespace meshtrain {

struct SampleOptions {
  int max_new_tokens = 200;
  float temperature = 1.0f;  // 0 = greedy
  int top_k = 0;             // 0 = whole vocabulary
};

// Picks the next token from one row of logits (only the first V are real).
int32_t sample_token(const float* logits, int V, const SampleOptions& opt, Rng& rng);

// Extends `prompt` (non-empty) by opt.max_new_tokens tokens; the context fed
// to the model is the last seq_len tokens. on_token sees each new token.
std::vector<int32_t> generate(Model& model, std::vector<int32_t> prompt, const SampleOptions& opt,
                              Rng& rng, const std::function<void(int32_t)>& on_token = {});

}  // namespace meshtrain
