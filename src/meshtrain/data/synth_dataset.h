// `meshtrain data synth`: train/val shards drawn from the synthetic grammar,
// plus DIR/entropy.json with the grammar's exact entropy rate (the lowest
// validation loss any model can reach on this data, in nats per token).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace meshtrain::data {

struct SynthOptions {
  std::string out_dir;
  int64_t tokens = 0;          // training tokens
  int64_t val_tokens = -1;     // -1: tokens / 20, at least 1
  uint64_t seed = 1;           // the sampled text
  uint64_t grammar_seed = 1;   // the language (and so its entropy rate)
  int64_t shard_tokens = 100'000'000;
};

struct SynthResult {
  double entropy_nats = 0;  // per token (= per byte)
  double entropy_bits = 0;
  int num_states = 0;
  int64_t train_tokens = 0;
  int64_t val_tokens = 0;
  std::vector<std::string> train_shards;
  std::vector<std::string> val_shards;
  std::string entropy_json_path;
};

// Writes DIR/train_*.bin, DIR/val_*.bin (independent streams from the same
// grammar) and DIR/entropy.json. Throws meshtrain::Error on bad options.
SynthResult write_synth_dataset(const SynthOptions& options);

}  // namespace meshtrain::data
