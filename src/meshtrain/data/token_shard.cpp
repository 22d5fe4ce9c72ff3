#include "meshtrain/data/token_shard.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "meshtrain/core/error.h"

namespace meshtrain::data {

static_assert(std::endian::native == std::endian::little,
              "token shards are little-endian; add byte swapping for this host");

namespace fs = std::filesystem;

TokenShard::TokenShard(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) fail("token shard '{}' does not exist", path);
  file_ = MappedFile(path);
  const uint64_t size = file_.size();
  if (size < kShardHeaderBytes)
    fail("'{}' is not an llm.c token shard: {} bytes is shorter than the {}-byte header", path,
         size, kShardHeaderBytes);
  int32_t header[5];
  std::memcpy(header, file_.data(), sizeof(header));
  const int32_t magic = header[0], version = header[1], count = header[2];
  bool masked = false;
  if (magic == kShardMagicMasked) {
    if (version != kShardVersionMasked)
      fail("'{}': unsupported masked shard version {} (expected {})", path, version,
           kShardVersionMasked);
    if (header[3] != 2 && header[3] != 4)
      fail("'{}': masked shard with {}-byte tokens (corrupt header: 2 or 4)", path, header[3]);
    if (header[4] < 1) fail("'{}': masked shard with window {} (corrupt header)", path, header[4]);
    token_bytes_ = header[3];
    window_ = header[4];
    masked = true;
  } else if (magic == kShardMagicU16) {
    if (version != kShardVersionU16)
      fail("'{}': unsupported token shard version {} for magic {} (expected {})", path, version,
           magic, kShardVersionU16);
    token_bytes_ = 2;
  } else if (magic == kShardMagicU32) {
    if (version != kShardVersionU32)
      fail("'{}': unsupported token shard version {} for magic {} (expected {})", path, version,
           magic, kShardVersionU32);
    token_bytes_ = 4;
  } else {
    fail("'{}' is not an llm.c token shard (magic {}, expected {} or {}; {} for masked "
         "instruction shards)", path, magic, kShardMagicU16, kShardMagicU32, kShardMagicMasked);
  }
  if (count < 0) fail("'{}': header says {} tokens (negative: corrupt header)", path, count);
  const uint64_t payload = size - kShardHeaderBytes;
  const uint64_t per_token = token_bytes_ + (masked ? 1 : 0);  // a mask byte each
  const uint64_t expected = static_cast<uint64_t>(count) * per_token;
  if (payload != expected) {
    const uint64_t holds = payload / per_token;
    if (payload < expected)
      fail("'{}' is truncated: header says {} tokens, file holds {}", path, count, holds);
    fail("'{}': header says {} tokens, but the file holds {} ({} bytes after the header; "
         "expected {})", path, count, holds, payload, expected);
  }
  version_ = version;
  num_tokens_ = count;
  tokens_ = file_.data() + kShardHeaderBytes;
  if (masked) {
    mask_ = tokens_ + static_cast<uint64_t>(count) * token_bytes_;
    for (int64_t i = 0; i < count; ++i)
      if (mask_[i] > 1) fail("'{}': loss-mask byte {} of token {} is not 0 or 1 (corrupt shard)", path, mask_[i], i);
  }
}

void TokenShard::read_mask(int64_t start, int64_t count, uint8_t* out) const {
  MT_CHECK(mask_, "'{}' is not a masked shard", path());
  MT_CHECK(start >= 0 && count >= 0 && start + count <= num_tokens_,
           "token range [{}, {}) out of range [0, {}) in '{}'", start, start + count, num_tokens_,
           path());
  std::memcpy(out, mask_ + start, static_cast<size_t>(count));
}

uint32_t TokenShard::token(int64_t i) const {
  MT_CHECK(i >= 0 && i < num_tokens_, "token index {} out of range [0, {}) in '{}'", i,
           num_tokens_, path());
  if (token_bytes_ == 2) {
    uint16_t v;
    std::memcpy(&v, tokens_ + 2 * i, 2);
    return v;
  }
  uint32_t v;
  std::memcpy(&v, tokens_ + 4 * i, 4);
  return v;
}

void TokenShard::read(int64_t start, int64_t count, int32_t* out) const {
  MT_CHECK(start >= 0 && count >= 0 && start + count <= num_tokens_,
           "token range [{}, {}) out of range [0, {}) in '{}'", start, start + count,
           num_tokens_, path());
  if (token_bytes_ == 2) {
    const uint8_t* p = tokens_ + 2 * start;
    for (int64_t i = 0; i < count; ++i) {
      uint16_t v;
      std::memcpy(&v, p + 2 * i, 2);
      out[i] = v;
    }
  } else {
    std::memcpy(out, tokens_ + 4 * start, static_cast<size_t>(count) * 4);
  }
}

namespace {

void fsync_dir(const fs::path& dir) {
  int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);  // best effort: makes the rename durable
    ::close(fd);
  }
}

void write_shard(const std::string& path, int32_t magic, int32_t version, const void* tokens,
                 int64_t count, size_t token_bytes, std::array<int32_t, 2> extra = {},
                 const uint8_t* mask = nullptr) {
  MT_CHECK(count <= kMaxShardTokens,
           "cannot write '{}': {} tokens exceed the llm.c header's int32 limit of {} per shard; "
           "split into several shards", path, count, kMaxShardTokens);
  std::array<int32_t, kShardHeaderInts> header{};
  header[0] = magic;
  header[1] = version;
  header[2] = static_cast<int32_t>(count);
  header[3] = extra[0];
  header[4] = extra[1];

  const fs::path target(path);
  if (target.has_parent_path()) {
    std::error_code ec;
    fs::create_directories(target.parent_path(), ec);
    if (ec) fail("cannot create folder '{}': {}", target.parent_path().string(), ec.message());
  }
  const std::string tmp = fmt::format("{}.tmp.{}", path, ::getpid());
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) fail("cannot write '{}': {}", tmp, std::strerror(errno));
  bool ok = std::fwrite(header.data(), 1, kShardHeaderBytes, f) == kShardHeaderBytes;
  const auto* bytes = static_cast<const uint8_t*>(tokens);
  uint64_t left = static_cast<uint64_t>(count) * token_bytes;
  while (ok && left > 0) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(left, 64u << 20));
    ok = std::fwrite(bytes, 1, n, f) == n;
    bytes += n;
    left -= n;
  }
  if (ok && mask && count > 0)
    ok = std::fwrite(mask, 1, static_cast<size_t>(count), f) == static_cast<size_t>(count);
  ok = ok && std::fflush(f) == 0 && ::fsync(fileno(f)) == 0;
  const int err = errno;
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) {
    std::remove(tmp.c_str());
    fail("cannot write '{}': {}", path, std::strerror(err));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int rename_err = errno;
    std::remove(tmp.c_str());
    fail("cannot rename '{}' to '{}': {}", tmp, path, std::strerror(rename_err));
  }
  fsync_dir(target.parent_path());
}

}  // namespace

void write_token_shard(const std::string& path, std::span<const uint16_t> tokens) {
  write_shard(path, kShardMagicU16, kShardVersionU16, tokens.data(),
              static_cast<int64_t>(tokens.size()), 2);
}

void write_token_shard_u32(const std::string& path, std::span<const uint32_t> tokens) {
  write_shard(path, kShardMagicU32, kShardVersionU32, tokens.data(),
              static_cast<int64_t>(tokens.size()), 4);
}

void write_masked_shard(const std::string& path, std::span<const int32_t> tokens,
                        std::span<const uint8_t> mask, int token_bytes, int64_t window) {
  MT_CHECK(tokens.size() == mask.size(), "'{}': {} tokens but {} mask bytes", path, tokens.size(),
           mask.size());
  MT_CHECK(token_bytes == 2 || token_bytes == 4, "token shards hold 2- or 4-byte tokens, not {}",
           token_bytes);
  MT_CHECK(window >= 1 && window <= INT32_MAX, "masked shard window {} out of range", window);
  const int64_t limit = token_bytes == 2 ? int64_t{1} << 16 : int64_t{1} << 32;
  std::vector<uint8_t> packed(tokens.size() * static_cast<size_t>(token_bytes));
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int64_t t = tokens[i];
    MT_CHECK(t >= 0 && t < limit, "token id {} does not fit {}-byte shard tokens", t, token_bytes);
    MT_CHECK(mask[i] <= 1, "loss-mask value {} at token {} is not 0 or 1", mask[i], i);
    const uint32_t v = static_cast<uint32_t>(t);
    std::memcpy(packed.data() + i * token_bytes, &v, static_cast<size_t>(token_bytes));  // little-endian
  }
  write_shard(path, kShardMagicMasked, kShardVersionMasked, packed.data(),
              static_cast<int64_t>(tokens.size()), static_cast<size_t>(token_bytes),
              {token_bytes, static_cast<int32_t>(window)}, mask.data());
}

// The NNNNNN of "PREFIX_NNNNNN.bin", or -1 when `name` is not in the series.
static int64_t series_index(const std::string& name, const std::string& prefix) {
  const std::string head = prefix + "_", tail = ".bin";
  if (name.size() < head.size() + 6 + tail.size() || name.compare(0, head.size(), head) != 0 ||
      name.compare(name.size() - tail.size(), tail.size(), tail) != 0)
    return -1;
  const std::string digits = name.substr(head.size(), name.size() - head.size() - tail.size());
  if (digits.size() > 12 || !std::all_of(digits.begin(), digits.end(), ::isdigit)) return -1;
  return std::stoll(digits);
}

std::string shard_path(const std::string& dir, const std::string& prefix, int64_t index) {
  return (fs::path(dir) / fmt::format("{}_{:06d}.bin", prefix, index)).string();
}

ShardSeriesWriter::ShardSeriesWriter(std::string dir, std::string prefix, int64_t shard_tokens,
                                     int token_bytes)
    : dir_(std::move(dir)), prefix_(std::move(prefix)), shard_tokens_(shard_tokens),
      token_bytes_(token_bytes) {
  MT_CHECK(shard_tokens_ >= 1 && shard_tokens_ <= kMaxShardTokens,
           "tokens per shard must be in [1, {}], got {}", kMaxShardTokens, shard_tokens_);
  MT_CHECK(token_bytes_ == 2 || token_bytes_ == 4, "token shards hold 2- or 4-byte tokens, not {}",
           token_bytes_);
}

template <typename T>
void ShardSeriesWriter::append_any(std::span<const T> tokens) {
  MT_CHECK(!finished_, "ShardSeriesWriter for '{}' already finished", prefix_);
  const int64_t limit = token_bytes_ == 2 ? int64_t{1} << 16 : int64_t{1} << 32;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const auto t = static_cast<int64_t>(tokens[i]);
    MT_CHECK(t >= 0 && t < limit,
             "token id {} does not fit {}-byte shard tokens (ids up to {}); vocabularies over "
             "65536 need 4-byte shards", t, token_bytes_, limit - 1);
    pending_.push_back(static_cast<uint32_t>(t));
    ++total_;
    if (pending_.size() == static_cast<size_t>(shard_tokens_)) flush();
  }
}

void ShardSeriesWriter::append(std::span<const uint16_t> tokens) { append_any(tokens); }
void ShardSeriesWriter::append(std::span<const int32_t> tokens) { append_any(tokens); }

void ShardSeriesWriter::flush() {
  const std::string path = shard_path(dir_, prefix_, static_cast<int64_t>(written_.size()));
  if (token_bytes_ == 4) {
    write_token_shard_u32(path, pending_);
  } else {
    const std::vector<uint16_t> narrow(pending_.begin(), pending_.end());
    write_token_shard(path, narrow);
  }
  written_.push_back(path);
  pending_.clear();
}

std::vector<std::string> ShardSeriesWriter::finish() {
  if (finished_) return written_;
  if (!pending_.empty()) flush();
  finished_ = true;
  // Remove PREFIX_NNNNNN.bin files beyond the ones just written.
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir_.empty() ? "." : dir_, ec)) {
    const int64_t index = series_index(entry.path().filename().string(), prefix_);
    if (index >= static_cast<int64_t>(written_.size())) fs::remove(entry.path(), ec);
  }
  return written_;
}

}  // namespace meshtrain::data
