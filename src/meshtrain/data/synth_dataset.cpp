#include "meshtrain/data/synth_dataset.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "meshtrain/core/error.h"
#include "meshtrain/data/synth_grammar.h"
#include "meshtrain/data/token_shard.h"

namespace meshtrain::data {

namespace fs = std::filesystem;

namespace {

// Tokens generated per step, to bound memory for any dataset size.
constexpr int64_t kGenerateBlock = 1 << 20;

// The validation stream uses its own seed so it never repeats the training text.
constexpr uint64_t kValSeedSalt = 0x76616c5f73747265ull;  // "val_stre"

std::vector<std::string> write_stream(const SynthGrammar& grammar, uint64_t seed, int64_t n,
                                      const std::string& dir, const std::string& prefix,
                                      int64_t shard_tokens) {
  SynthSampler sampler(grammar, seed);
  ShardSeriesWriter writer(dir, prefix, shard_tokens);
  std::vector<uint16_t> block;
  for (int64_t done = 0; done < n;) {
    block.resize(static_cast<size_t>(std::min(kGenerateBlock, n - done)));
    sampler.generate(block);
    writer.append(block);
    done += static_cast<int64_t>(block.size());
  }
  return writer.finish();
}

}  // namespace

SynthResult write_synth_dataset(const SynthOptions& options) {
  MT_CHECK(!options.out_dir.empty(), "no output folder given: pass --out DIR");
  MT_CHECK(options.tokens >= 1, "--tokens must be at least 1, got {}", options.tokens);
  const int64_t val_tokens =
      options.val_tokens >= 0 ? options.val_tokens : std::max<int64_t>(1, options.tokens / 20);

  const SynthGrammar grammar = SynthGrammar::build(options.grammar_seed);
  SynthResult r;
  r.entropy_nats = grammar.entropy_rate_nats();
  r.entropy_bits = r.entropy_nats / std::log(2.0);
  r.num_states = grammar.num_states();

  std::error_code ec;
  fs::create_directories(options.out_dir, ec);
  if (ec) fail("cannot create output folder '{}': {}", options.out_dir, ec.message());
  r.train_shards = write_stream(grammar, options.seed, options.tokens, options.out_dir, "train",
                                options.shard_tokens);
  r.val_shards = write_stream(grammar, options.seed ^ kValSeedSalt, val_tokens, options.out_dir,
                              "val", options.shard_tokens);
  r.train_tokens = options.tokens;
  r.val_tokens = val_tokens;

  nlohmann::ordered_json j;
  j["entropy_nats_per_token"] = r.entropy_nats;
  j["entropy_bits_per_token"] = r.entropy_bits;
  j["note"] = "exact entropy rate of the generating grammar: the lowest achievable loss";
  j["grammar"] = "meshtrain synth v1 (unifilar word-like automaton)";
  j["grammar_seed"] = options.grammar_seed;
  j["grammar_states"] = r.num_states;
  j["seed"] = options.seed;
  j["vocab_size"] = 256;
  j["train_tokens"] = r.train_tokens;
  j["val_tokens"] = r.val_tokens;
  j["train_shards"] = r.train_shards.size();
  j["val_shards"] = r.val_shards.size();
  r.entropy_json_path = (fs::path(options.out_dir) / "entropy.json").string();
  const std::string tmp = r.entropy_json_path + ".tmp";
  {
    std::ofstream out(tmp);
    out << j.dump(2) << "\n";
    if (!out) fail("cannot write '{}'", tmp);
  }
  fs::rename(tmp, r.entropy_json_path, ec);
  if (ec) fail("cannot write '{}': {}", r.entropy_json_path, ec.message());
  return r;
}

}  // namespace meshtrain::data
