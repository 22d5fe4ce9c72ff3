#include "meshtrain/core/debug_log.h"
#include "meshtrain/data/shard_set.h"

#include <glob.h>

#include <algorithm>

#include "meshtrain/core/error.h"

namespace meshtrain::data {

std::vector<std::string> expand_shard_glob(const std::string& pattern, const char* what, const char* hint) {
  MT_CHECK(!pattern.empty(), "empty shard pattern: give a glob such as 'data/x_train_*.bin'");
  glob_t g{};
  const int rc = ::glob(pattern.c_str(), GLOB_ERR, nullptr, &g);
  std::vector<std::string> paths;
  if (rc == 0)
    for (size_t i = 0; i < g.gl_pathc; ++i) paths.emplace_back(g.gl_pathv[i]);
  ::globfree(&g);
  if (rc == GLOB_NOMATCH || (rc == 0 && paths.empty()))
    fail("no {} match '{}'{}", what, pattern, hint);
  if (rc != 0) fail("cannot expand shard pattern '{}' (glob error {})", pattern, rc);
  std::sort(paths.begin(), paths.end());  // glob sorts by locale; we want bytes
  return paths;
}

ShardSet::ShardSet(const std::string& pattern, int64_t seq_len)
    : pattern_(pattern), seq_len_(seq_len) {
  MT_CHECK(seq_len >= 1, "sequence length must be >= 1, got {}", seq_len);
  window_begin_.push_back(0);
  for (const std::string& path : expand_shard_glob(pattern)) {
    shards_.emplace_back(path);
    const TokenShard& s = shards_.back();
    if (shards_.size() == 1) masked_ = s.masked();
    if (s.masked() != masked_)
      fail("'{}' mixes masked instruction shards and plain token shards ('{}' is {}); keep "
           "them in separate folders", pattern, path, s.masked() ? "masked" : "plain");
    if (masked_ && s.window() != seq_len)
      fail("'{}' holds instruction examples laid out for seq_len {}, but training uses "
           "seq_len {}: prepare them again with --seq-len {} or set model.seq_len={}", path,
           s.window(), seq_len, seq_len, s.window());
    const int64_t n = s.num_tokens();
    num_tokens_ += n;
    // Starts 0, T, 2T, ... with start + T + 1 <= n.
    const int64_t windows = n >= seq_len + 1 ? (n - 1) / seq_len : 0;
    window_begin_.push_back(window_begin_.back() + windows);
  }
  if (num_windows() == 0)
    fail("the {} shard(s) matching '{}' hold {} tokens, but none has the {} tokens one window "
         "of seq_len {} + 1 needs", shards_.size(), pattern, num_tokens_, seq_len + 1, seq_len);
  MT_LOG(Info, Data, "'{}': {} shard(s), {} tokens, {} windows of {} tokens{}", pattern,
         shards_.size(), num_tokens_, num_windows(), seq_len, masked_ ? " (masked instruction data)" : "");
}

std::pair<size_t, int64_t> ShardSet::locate(int64_t id) const {
  MT_CHECK(id >= 0 && id < num_windows(), "window {} out of range [0, {})", id, num_windows());
  const auto it = std::upper_bound(window_begin_.begin(), window_begin_.end(), id);
  const size_t shard = static_cast<size_t>(it - window_begin_.begin()) - 1;
  return {shard, (id - window_begin_[shard]) * seq_len_};
}

void ShardSet::read_window(int64_t id, int32_t* out, uint8_t* mask) const {
  const auto [shard, start] = locate(id);
  shards_[shard].read(start, seq_len_ + 1, out);
  if (mask && masked_) shards_[shard].read_mask(start, seq_len_ + 1, mask);
}

}  // namespace meshtrain::data
