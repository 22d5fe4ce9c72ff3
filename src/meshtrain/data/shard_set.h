// The shards a glob pattern names, cut into training windows.
//
// A window is T+1 consecutive tokens of one shard (inputs and their next-token
// targets). Windows start at 0, T, 2T, ... (stride T: each token is a target
// exactly once) and never cross a shard boundary. Windows are numbered
// globally, shard by shard in sorted file order.
//
// Masked shards (instruction data, token_shard.h) hold one example per
// window of the seq_len they were prepared for; a set is all masked or none,
// and its window must equal seq_len (a clear error otherwise).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "meshtrain/data/token_shard.h"

namespace meshtrain::data {

// Sorted paths matching a shell glob ("data/x_train_*.bin"); throws
// meshtrain::Error when nothing matches: "no <what> match '<pattern>'<hint>".
std::vector<std::string> expand_shard_glob(const std::string& pattern, const char* what = "token shards",
                                           const char* hint = "");

class ShardSet {
 public:
  // Opens and validates every matching shard; throws when none matches or no
  // shard holds a single window of seq_len + 1 tokens.
  ShardSet(const std::string& pattern, int64_t seq_len);

  const std::string& pattern() const { return pattern_; }
  int64_t seq_len() const { return seq_len_; }
  size_t num_shards() const { return shards_.size(); }
  const TokenShard& shard(size_t i) const { return shards_.at(i); }
  int64_t num_tokens() const { return num_tokens_; }
  int64_t num_windows() const { return window_begin_.back(); }

  bool masked() const { return masked_; }
  // Copies window `id`'s seq_len + 1 tokens into out (and, for masked
  // shards, their loss-mask bytes into mask when it is given).
  void read_window(int64_t id, int32_t* out, uint8_t* mask = nullptr) const;
  // (shard index, first token) of window `id`.
  std::pair<size_t, int64_t> locate(int64_t id) const;

 private:
  std::string pattern_;
  int64_t seq_len_;
  std::vector<TokenShard> shards_;
  std::vector<int64_t> window_begin_;  // first window id of each shard; back() = total
  int64_t num_tokens_ = 0;
  bool masked_ = false;
};

}  // namespace meshtrain::data
