// One rank's shard file: a standard safetensors file holding a 1-D slice of
// each flat buffer (tensor name = buffer name), the slice's element offset in
// metadata ("<buffer>.offset") and the rank's own state ("rank_state", JSON).
// Written atomically; the CRC32C of the exact bytes is computed while writing,
// so checksumming costs no second pass over the data.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "meshtrain/ckpt/shard_layout.h"
#include "meshtrain/core/dtype.h"

namespace meshtrain::ckpt {

struct ShardSlice {
  std::string buffer;     // "params", "exp_avg", ...
  DType dtype = DType::F32;
  const void* data = nullptr;  // the slice's first element
  ElemRange range;        // its elements in the flat buffer
};

struct ShardFileResult {
  uint64_t bytes = 0;
  uint32_t crc32c = 0;
};

ShardFileResult write_shard_file(const std::string& path, const std::vector<ShardSlice>& slices,
                                 std::map<std::string, std::string> metadata);

// The element offset recorded for `buffer` in a shard file's metadata (-1 if absent).
int64_t shard_offset(const std::map<std::string, std::string>& metadata, const std::string& buffer);

}  // namespace meshtrain::ckpt
