#include "meshtrain/nn/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <span>

namespace meshtrain {

int32_t sample_token(const float* logits, int V, const SampleOptions& opt, Rng& rng) {
  if (opt.temperature <= 0.0f) {
    return static_cast<int32_t>(std::max_element(logits, logits + V) - logits);
  }
  std::vector<int32_t> idx(V);
  std::iota(idx.begin(), idx.end(), 0);
  int k = (opt.top_k > 0 && opt.top_k < V) ? opt.top_k : V;
  if (k < V) {
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                      [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
    idx.resize(k);
  }
  float mx = -INFINITY;
  for (int32_t i : idx) mx = std::max(mx, logits[i]);
  std::vector<double> p(idx.size());
  double z = 0;
  for (size_t j = 0; j < idx.size(); ++j) z += (p[j] = std::exp((logits[idx[j]] - mx) / opt.temperature));
  if (opt.top_p > 0.0f && opt.top_p < 1.0f) {
    // Nucleus: keep the most likely tokens until their mass reaches top_p.
    std::vector<size_t> order(idx.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return p[a] != p[b] ? p[a] > p[b] : idx[a] < idx[b];
    });
    std::vector<int32_t> kept_idx;
    std::vector<double> kept_p;
    double mass = 0;
    for (size_t j : order) {
      kept_idx.push_back(idx[j]);
      kept_p.push_back(p[j]);
      mass += p[j];
      if (mass >= opt.top_p * z) break;
    }
    idx = std::move(kept_idx);
    p = std::move(kept_p);
    z = mass;
  }
  double u = rng.uniform_double() * z;
  for (size_t j = 0; j < idx.size(); ++j) {
    u -= p[j];
    if (u <= 0) return idx[j];
  }
  return idx.back();
}

namespace {
bool is_stop(const SampleOptions& opt, int32_t tok) {
  return std::find(opt.stop_tokens.begin(), opt.stop_tokens.end(), tok) != opt.stop_tokens.end();
}
}  // namespace

std::vector<int32_t> generate(Decoder& dec, const ModelSpec& spec, std::vector<int32_t> prompt,
                              const SampleOptions& opt, Rng& rng,
                              const std::function<void(int32_t)>& on_token) {
  MT_CHECK(!prompt.empty(), "generation needs a prompt of at least one token");
  const int T = dec.capacity();
  const auto refill = [&](size_t keep) {
    dec.reset();
    return dec.feed(std::span<const int32_t>(prompt.data() + prompt.size() - keep, keep));
  };
  const float* logits = refill(std::min<size_t>(prompt.size(), static_cast<size_t>(T)));
  for (int n = 0; n < opt.max_new_tokens; ++n) {
    const int32_t tok = sample_token(logits, spec.vocab_size(), opt, rng);
    prompt.push_back(tok);
    if (on_token) on_token(tok);
    if (is_stop(opt, tok) || n + 1 == opt.max_new_tokens) break;
    if (dec.position() == T) {
      logits = refill(static_cast<size_t>(std::max(1, T / 2)));  // context shift
    } else {
      logits = dec.feed(std::span<const int32_t>(&prompt.back(), 1));
    }
  }
  return prompt;
}

std::vector<int32_t> generate(Model& model, std::vector<int32_t> prompt, const SampleOptions& opt,
                              Rng& rng, const std::function<void(int32_t)>& on_token) {
  MT_CHECK(!prompt.empty(), "generation needs a prompt of at least one token");
  const ModelSpec& spec = model.spec();
  if (std::unique_ptr<Decoder> dec = opt.kv_cache ? model.make_decoder() : nullptr)
    return generate(*dec, spec, std::move(prompt), opt, rng, on_token);
  for (int n = 0; n < opt.max_new_tokens; ++n) {
    const int T = std::min<int>(static_cast<int>(prompt.size()), spec.seq_len());
    const int32_t* ctx = prompt.data() + prompt.size() - T;
    model.forward(MicroBatch{ctx, nullptr, 1, T});
    const float* last = model.logits() + static_cast<int64_t>(T - 1) * model.logits_stride();
    int32_t tok = sample_token(last, spec.vocab_size(), opt, rng);
    prompt.push_back(tok);
    if (on_token) on_token(tok);
    if (is_stop(opt, tok)) break;
  }
  return prompt;
}

}  // namespace meshtrain
