// Token shards in llm.c's format, so shards written by llm.c's data scripts
// train here and ours train there.
//
// Layout: a 1024-byte header of 256 little-endian int32
//   [0] magic, [1] version, [2] token count, [3..255] zero
// followed by the tokens:
//   magic 20240520, version 1: uint16 tokens (GPT-2 style vocabularies, and ours)
//   magic 20240801, version 7: uint32 tokens (llm.c's Llama-3 shards; read only)
//   magic 20261125, version 1: meshtrain's masked shards (instruction data):
//     header [3] token bytes (2 or 4), [4] the window (seq_len) the examples
//     were laid out for; then the tokens, then one byte per token: 1 when
//     the token is trained on as a target (a response token), 0 when not
//     (prompt, template, padding)
//
// Sizes and offsets are 64-bit throughout. The header's count is an int32, so
// one shard holds at most 2^31-1 tokens (4 GiB of uint16): the writer refuses
// larger shards (write a series instead, see ShardSeriesWriter), and the reader
// requires the file size to equal exactly 1024 + token_bytes * count.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "meshtrain/data/mapped_file.h"

namespace meshtrain::data {

constexpr uint64_t kShardHeaderBytes = 1024;
constexpr int kShardHeaderInts = 256;
constexpr int32_t kShardMagicU16 = 20240520;
constexpr int32_t kShardVersionU16 = 1;
constexpr int32_t kShardMagicU32 = 20240801;
constexpr int32_t kShardVersionU32 = 7;
constexpr int32_t kShardMagicMasked = 20261125;
constexpr int32_t kShardVersionMasked = 1;
constexpr int64_t kMaxShardTokens = INT32_MAX;  // the header's count field is an int32

// A validated, memory-mapped shard. Throws meshtrain::Error naming the file
// when it is missing, shorter than the header, not an llm.c token shard, of an
// unsupported version, or truncated.
class TokenShard {
 public:
  explicit TokenShard(const std::string& path);

  const std::string& path() const { return file_.path(); }
  int64_t num_tokens() const { return num_tokens_; }
  int version() const { return version_; }
  int token_bytes() const { return token_bytes_; }  // 2 (version 1) or 4 (version 7)
  // A masked shard (instruction data): each token also says whether it is
  // trained on, and the examples sit one per window of window() tokens.
  bool masked() const { return mask_ != nullptr; }
  int64_t window() const { return window_; }

  uint32_t token(int64_t i) const;
  // Copies tokens [start, start+count) into out as int32 (bounds-checked).
  void read(int64_t start, int64_t count, int32_t* out) const;
  // Masked shards: copies the loss-mask bytes of [start, start+count).
  void read_mask(int64_t start, int64_t count, uint8_t* out) const;

 private:
  MappedFile file_;
  const uint8_t* tokens_ = nullptr;
  const uint8_t* mask_ = nullptr;
  int64_t window_ = 0;
  int64_t num_tokens_ = 0;
  int version_ = 0;
  int token_bytes_ = 0;
};

// Writes a version-1 shard atomically: a temporary file in the same folder,
// fsync, then rename, so readers never see a half-written shard.
void write_token_shard(const std::string& path, std::span<const uint16_t> tokens);
// The same for version 7 (uint32 tokens), for vocabularies beyond 65536.
void write_token_shard_u32(const std::string& path, std::span<const uint32_t> tokens);
// A masked shard: `tokens` with their loss mask (0/1, one per token), laid
// out for windows of `window` tokens; token_bytes 2 or 4.
void write_masked_shard(const std::string& path, std::span<const int32_t> tokens,
                        std::span<const uint8_t> mask, int token_bytes, int64_t window);

// "DIR/PREFIX_000042.bin"
std::string shard_path(const std::string& dir, const std::string& prefix, int64_t index);

// Streams tokens into DIR/PREFIX_000000.bin, DIR/PREFIX_000001.bin, ... with at
// most `shard_tokens` tokens each. finish() writes the last partial shard and
// removes stale PREFIX_NNNNNN.bin files a previous, larger run left behind (a
// glob over the folder would otherwise pick them up). `token_bytes` 2 writes
// version-1 (uint16) shards, 4 version-7 (uint32) ones for vocabularies over
// 65536 (Llama 3's 128256).
class ShardSeriesWriter {
 public:
  ShardSeriesWriter(std::string dir, std::string prefix, int64_t shard_tokens,
                    int token_bytes = 2);
  void append(std::span<const uint16_t> tokens);
  // Throws meshtrain::Error for an id that does not fit the shards' width.
  void append(std::span<const int32_t> tokens);
  std::vector<std::string> finish();
  int64_t tokens_written() const { return total_; }
  int token_bytes() const { return token_bytes_; }

 private:
  template <typename T>
  void append_any(std::span<const T> tokens);
  void flush();
  std::string dir_, prefix_;
  int64_t shard_tokens_;
  int token_bytes_;
  std::vector<uint32_t> pending_;
  std::vector<std::string> written_;
  int64_t total_ = 0;
  bool finished_ = false;
};

}  // namespace meshtrain::data
