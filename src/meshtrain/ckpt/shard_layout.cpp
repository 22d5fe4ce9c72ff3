#include "meshtrain/ckpt/shard_layout.h"

#include <algorithm>

#include <fmt/format.h>

#include "meshtrain/core/error.h"

namespace meshtrain::ckpt {

ElemRange shard_range(int64_t numel, int world, int rank) {
  MT_CHECK(world >= 1 && rank >= 0 && rank < world && numel >= 0,
           "shard_range: rank {} of world {} over {} elements is out of range", rank, world, numel);
  const int64_t chunk = (numel + world - 1) / world;
  const int64_t b = std::min(numel, chunk * rank);
  const int64_t e = std::min(numel, chunk * (rank + 1));
  return {b, e};
}

ElemRange intersect(ElemRange a, ElemRange b) {
  ElemRange r{std::max(a.begin, b.begin), std::min(a.end, b.end)};
  if (r.end < r.begin) r.end = r.begin;
  return r;
}

std::string shard_file_name(int rank, int world) {
  return fmt::format("shard_{}_of_{}.safetensors", rank, world);
}

}  // namespace meshtrain::ckpt
