// `meshtrain sample`: generate text from a saved model (GPT or Llama), with
// the byte-level tokenizer or a Hugging Face tokenizer.json, a KV cache, and
// temperature / top-k / top-p sampling. The text goes to stdout as it is
// made; the figures (tokens/s) to stderr.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "commands.h"
#include "meshtrain/core/threads.h"
#include "meshtrain/data/tokenizer.h"
#include "meshtrain/io/gpt_model_file.h"
#include "meshtrain/io/hf_llama.h"
#include "meshtrain/io/model_file.h"
#include "meshtrain/nn/llama.h"
#include "meshtrain/nn/model_registry.h"
#include "meshtrain/nn/sampler.h"

namespace meshtrain::cli {

namespace {
namespace fs = std::filesystem;

struct SampleArgs {
  std::string model;
  std::string preset;
  std::string tokenizer;
  std::string prompt = "\n";
  int tokens = 200;
  float temperature = 0.8f;
  int top_k = 40;
  float top_p = 1.0f;
  std::vector<std::string> stop;
  uint64_t seed = 1;
  int threads = 0;
  int n_head = 0;
  bool no_special = false;
  bool no_kv_cache = false;
};

// Any model file sample knows: a Hugging Face Llama folder, a meshtrain model
// file of any family, or a GPT-2 file (meshtrain, Hugging Face, llm.c); or a
// preset with random weights (for benchmarks).
std::unique_ptr<Model> load_model(const SampleArgs& a) {
  if (!a.preset.empty()) {
    std::unique_ptr<Model> m = model_preset(a.preset)->build();
    m->init_weights(a.seed);
    return m;
  }
  if (is_hf_llama(a.model)) {
    const LlamaConfig cfg = read_hf_llama_config(a.model);
    auto m = std::make_unique<Llama>(cfg);
    load_hf_llama_weights(a.model, m->param_buffer(), cfg);
    return m;
  }
  if (is_model_file(a.model)) {
    const auto spec = read_model_file_spec(a.model);
    auto m = spec->build();
    load_model_file(a.model, *spec, m->param_buffer());
    return m;
  }
  const GPTConfig cfg = read_gpt_config(a.model, a.n_head);
  auto m = std::make_unique<GPT>(cfg);
  load_gpt_weights(a.model, m->params(), cfg);
  return m;
}

// --tokenizer, else a tokenizer.json beside the model, else bytes when the
// vocabulary is byte-sized.
std::unique_ptr<data::Tokenizer> find_tokenizer(const SampleArgs& a, int vocab) {
  if (!a.tokenizer.empty()) return data::load_tokenizer(a.tokenizer);
  if (!a.model.empty()) {
    const fs::path m(a.model);
    const fs::path beside = (fs::is_directory(m) ? m : m.parent_path()) / "tokenizer.json";
    if (fs::exists(beside)) return data::load_tokenizer(beside.string());
  }
  if (vocab <= 256) return data::load_tokenizer("bytes");
  throw UsageError(fmt::format("the model has a vocabulary of {} tokens and no tokenizer.json "
                               "lies beside it: pass --tokenizer FILE", vocab));
}

void run_sample(const SampleArgs& a) {
  if (a.tokens < 0) throw UsageError("--tokens must be >= 0");
  if (a.temperature < 0) throw UsageError("--temperature must be >= 0");
  if (a.top_p <= 0 || a.top_p > 1) throw UsageError("--top-p must be in (0, 1]");
  if (a.model.empty() == a.preset.empty()) throw UsageError("give one of --model or --preset");
  set_thread_count(a.threads > 0 ? a.threads : default_thread_count());
  const std::unique_ptr<Model> model = load_model(a);
  const int vocab = model->spec().vocab_size();
  const auto tok = find_tokenizer(a, vocab);
  MT_CHECK(tok->vocab_size() <= vocab,
           "tokenizer {} has {} tokens but the model only {}: they do not belong together",
           tok->describe(), tok->vocab_size(), vocab);
  std::vector<int32_t> prompt = tok->encode(a.prompt, !a.no_special);
  if (prompt.empty()) prompt = tok->encode("\n");
  MT_CHECK(!prompt.empty(), "the prompt encodes to no tokens; give --prompt TEXT");
  SampleOptions opt;
  opt.max_new_tokens = a.tokens;
  opt.temperature = a.temperature;
  opt.top_k = a.top_k;
  opt.top_p = a.top_p;
  opt.kv_cache = !a.no_kv_cache;
  for (const std::string& s : a.stop) {
    const std::optional<int32_t> id = tok->token_id(s);
    if (!id) throw UsageError(fmt::format("--stop '{}' is not a token of {}", s, tok->describe()));
    opt.stop_tokens.push_back(*id);
  }
  Rng rng(a.seed);
  std::fwrite(a.prompt.data(), 1, a.prompt.size(), stdout);
  std::fflush(stdout);
  int generated = 0;
  const auto start = std::chrono::steady_clock::now();
  auto first = start;
  generate(*model, prompt, opt, rng, [&](int32_t id) {
    if (generated++ == 0) first = std::chrono::steady_clock::now();
    const std::string bytes = tok->continuation_bytes(id);
    std::fwrite(bytes.data(), 1, bytes.size(), stdout);
    std::fflush(stdout);
  });
  const auto end = std::chrono::steady_clock::now();
  std::fputc('\n', stdout);
  std::fflush(stdout);  // the text before the figures on a terminal
  const double prefill = std::chrono::duration<double>(first - start).count();
  const double rest = std::chrono::duration<double>(end - first).count();
  fmt::print(stderr,
             "generated {} tokens after a {}-token prompt: {:.1f} tokens/s ({:.1f} ms to the "
             "first token, then {:.2f} ms per token; KV cache {})\n",
             generated, prompt.size(), generated / std::max(1e-9, prefill + rest), prefill * 1e3,
             generated > 1 ? rest * 1e3 / (generated - 1) : 0.0, opt.kv_cache ? "on" : "off");
}
}  // namespace

void register_sample(CLI::App& app) {
  auto a = std::make_shared<SampleArgs>();
  auto* c = app.add_subcommand("sample", "Generate text from a saved model (GPT or Llama)");
  c->alias("generate");
  c->add_option("--model", a->model,
                "Model: a meshtrain model file, a Hugging Face Llama folder or GPT-2 "
                "safetensors, an llm.c .bin");
  c->add_option("--preset", a->preset, "Or a preset with random weights (benchmarks)");
  c->add_option("--tokenizer", a->tokenizer,
                "tokenizer.json (or its folder), or 'bytes'; default: one beside the model, "
                "else bytes for byte-sized vocabularies");
  c->add_option("--prompt", a->prompt, "Text to continue");
  c->add_option("--tokens", a->tokens, "Tokens to generate")->capture_default_str();
  c->add_option("--temperature", a->temperature, "Sampling temperature (0 = greedy)")->capture_default_str();
  c->add_option("--top-k", a->top_k, "Sample among the k most likely tokens (0 = all)")->capture_default_str();
  c->add_option("--top-p", a->top_p, "Nucleus sampling: the most likely tokens up to this mass")
      ->capture_default_str();
  c->add_option("--stop", a->stop, "Stop after this token (e.g. \"<|eot_id|>\"); repeatable");
  c->add_option("--seed", a->seed, "Random seed")->capture_default_str();
  c->add_option("--threads", a->threads, "Compute threads");
  c->add_option("--n-head", a->n_head, "Heads, for Hugging Face files that do not record it");
  c->add_flag("--no-special", a->no_special,
              "Do not add the tokenizer's special tokens around the prompt (e.g. Llama 3's "
              "<|begin_of_text|>)");
  c->add_flag("--no-kv-cache", a->no_kv_cache,
              "Recompute the whole context for every token (slow; for comparison)");
  c->callback([a] { run_sample(*a); });
}

}  // namespace meshtrain::cli
