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
  float top_p = 1.0f;        // nucleus: the smallest set of tokens holding this probability
  std::vector<int32_t> stop_tokens;  // generation ends after emitting one of these
  bool kv_cache = true;      // false: recompute the whole context for every token
};

// Picks the next token from one row of logits (only the first V are real).
int32_t sample_token(const float* logits, int V, const SampleOptions& opt, Rng& rng);

// Extends `prompt` (non-empty) by up to opt.max_new_tokens tokens (fewer when
// a stop token comes); on_token sees each new token. With the model's KV-cache
// decoder (Model::make_decoder) the prompt is fed once and each token after
// costs one position; when the context (seq_len) fills up, the cache restarts
// from the last seq_len / 2 tokens. Without one (or with kv_cache = false)
// every token recomputes the last seq_len tokens.
std::vector<int32_t> generate(Model& model, std::vector<int32_t> prompt, const SampleOptions& opt,
                              Rng& rng, const std::function<void(int32_t)>& on_token = {});
// The same with a decoder of a model of `spec` (ModelSpec::make_decoder, e.g.
// over a tensor-parallel run's gathered parameters).
std::vector<int32_t> generate(Decoder& decoder, const ModelSpec& spec, std::vector<int32_t> prompt,
                              const SampleOptions& opt, Rng& rng,
                              const std::function<void(int32_t)>& on_token = {});

}  // namespace meshtrain
