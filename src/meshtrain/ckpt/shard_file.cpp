#include "meshtrain/ckpt/shard_file.h"

#include <fcntl.h>

#include <nlohmann/json.hpp>

#include "meshtrain/ckpt/crc32c.h"
#include "meshtrain/core/error.h"
#include "meshtrain/io/atomic_file.h"
#include "meshtrain/launch/heartbeat.h"

namespace meshtrain::ckpt {

namespace {
// Large writes keep the kernel streaming; the CRC runs over the same chunk
// while it is still in cache.
constexpr size_t kWriteChunk = 8u << 20;
}  // namespace

ShardFileResult write_shard_file(const std::string& path, const std::vector<ShardSlice>& slices,
                                 std::map<std::string, std::string> metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  uint64_t offset = 0;
  for (const auto& s : slices) {
    metadata[s.buffer + ".offset"] = std::to_string(s.range.begin);
    const uint64_t n = static_cast<uint64_t>(s.range.count()) * dtype_size(s.dtype);
    header[s.buffer] = {{"dtype", std::string(dtype_name(s.dtype))},
                        {"shape", {s.range.count()}},
                        {"data_offsets", {offset, offset + n}}};
    offset += n;
  }
  nlohmann::ordered_json full = nlohmann::ordered_json::object();
  full["__metadata__"] = metadata;
  for (auto& [k, v] : header.items()) full[k] = v;
  std::string text = full.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(uint64_t(text.size()) >> (8 * i));

  ShardFileResult r;
  AtomicFileWriter w(path);
  // Writeback starts behind the writes (sync_file_range, no waiting), so the
  // disk is busy while later chunks are still being copied in and the final
  // fsync has little left to do: a plain write-everything-then-fsync (dd
  // conv=fsync) leaves the disk idle until the end.
  uint64_t flushed = 0;
  auto put = [&](const void* p, size_t n) {
    w.write(p, n);
    r.crc32c = crc32c(p, n, r.crc32c);
    r.bytes += n;
    if (r.bytes - flushed >= kWriteChunk) {
      ::sync_file_range(w.fd(), static_cast<off64_t>(flushed), static_cast<off64_t>(r.bytes - flushed),
                        SYNC_FILE_RANGE_WRITE);
      flushed = r.bytes;
    }
  };
  put(len, 8);
  put(text.data(), text.size());
  for (const auto& s : slices) {
    const char* p = static_cast<const char*>(s.data);
    size_t left = static_cast<size_t>(s.range.count()) * dtype_size(s.dtype);
    MT_CHECK(left == 0 || p, "shard file {}: no data for buffer '{}'", path, s.buffer);
    while (left > 0) {
      const size_t n = std::min(left, kWriteChunk);
      put(p, n);
      launch::heartbeat_pulse();  // a long write is progress, not a hang
      p += n;
      left -= n;
    }
  }
  w.commit();
  return r;
}

int64_t shard_offset(const std::map<std::string, std::string>& metadata, const std::string& buffer) {
  auto it = metadata.find(buffer + ".offset");
  if (it == metadata.end()) return -1;
  return std::stoll(it->second);
}

}  // namespace meshtrain::ckpt
