// `meshtrain sample`: generate text from a saved model (byte-level tokens).
#include <fmt/format.h>

#include <cstdio>

#include "commands.h"
#include "meshtrain/core/threads.h"
#include "meshtrain/io/gpt_model_file.h"
#include "meshtrain/nn/sampler.h"

namespace meshtrain::cli {

namespace {
struct SampleArgs {
  std::string model;
  std::string prompt = "\n";
  int tokens = 200;
  float temperature = 0.8f;
  int top_k = 40;
  uint64_t seed = 1;
  int threads = 0;
  int n_head = 0;
};

void run_sample(const SampleArgs& a) {
  if (a.tokens < 0) throw UsageError("--tokens must be >= 0");
  if (a.temperature < 0) throw UsageError("--temperature must be >= 0");
  set_thread_count(a.threads > 0 ? a.threads : default_thread_count());
  GPTConfig cfg = read_gpt_config(a.model, a.n_head);
  MT_CHECK(cfg.vocab_size <= 256,
           "model {} has a vocabulary of {} tokens; `sample` speaks the byte-level tokenizer "
           "(256 tokens) only", a.model, cfg.vocab_size);
  GPT model(cfg);
  load_gpt_weights(a.model, model.params(), cfg);
  std::vector<int32_t> prompt;
  for (unsigned char c : a.prompt) prompt.push_back(c);
  if (prompt.empty()) prompt.push_back('\n');
  for (int32_t t : prompt) {
    MT_CHECK(t < cfg.vocab_size, "prompt byte {} is outside the model's vocabulary of {}", t,
             cfg.vocab_size);
  }
  SampleOptions opt;
  opt.max_new_tokens = a.tokens;
  opt.temperature = a.temperature;
  opt.top_k = a.top_k;
  Rng rng(a.seed);
  std::fwrite(a.prompt.data(), 1, a.prompt.size(), stdout);
  generate(model, prompt, opt, rng, [](int32_t tok) {
    std::fputc(static_cast<unsigned char>(tok), stdout);
    std::fflush(stdout);
  });
  std::fputc('\n', stdout);
}
}  // namespace

void register_sample(CLI::App& app) {
  auto a = std::make_shared<SampleArgs>();
  auto* c = app.add_subcommand("sample", "Generate text from a saved model");
  c->add_option("--model", a->model, "Model file (meshtrain or Hugging Face safetensors, llm.c .bin)")
      ->required();
  c->add_option("--prompt", a->prompt, "Text to continue");
  c->add_option("--tokens", a->tokens, "Tokens to generate")->capture_default_str();
  c->add_option("--temperature", a->temperature, "Sampling temperature (0 = greedy)")->capture_default_str();
  c->add_option("--top-k", a->top_k, "Sample among the k most likely tokens (0 = all)")->capture_default_str();
  c->add_option("--seed", a->seed, "Random seed")->capture_default_str();
  c->add_option("--threads", a->threads, "Compute threads");
  c->add_option("--n-head", a->n_head, "Heads, for Hugging Face files that do not record it");
  c->callback([a] { run_sample(*a); });
}

}  // namespace meshtrain::cli
