#include "meshtrain/nn/shard_slicing.h"

#include <unordered_map>

#include <cstring>

#include "meshtrain/core/error.h"

namespace meshtrain {

std::vector<ShardRun> shard_runs(const ParamLayout& full, const ParamLayout& shard, int tp_rank) {
  // A shard's parameters by name: a tensor-parallel shard holds every one
  // (in the same order), a pipeline stage a subset (wte maybe twice over
  // stages, each copy mapping to the same logical elements).
  std::unordered_map<std::string, const ParamInfo*> by_name;
  for (const ParamInfo& f : full.params) by_name.emplace(f.name, &f);
  std::vector<ShardRun> runs;
  for (const ParamInfo& s : shard.params) {
    const auto it = by_name.find(s.name);
    MT_CHECK(it != by_name.end(), "shard parameter {} is not in the model", s.name);
    const ParamInfo& f = *it->second;
    MT_CHECK(f.shape == s.logical_shape(), "shard parameter {} does not match the model's shape",
             s.name);
    if (s.split_dim < 0) {
      runs.push_back({s.begin, f.begin, s.numel(), true});
      continue;
    }
    // Row-major: the split dimension's slice is `outer` x `parts` runs of
    // `inner` x (its part's slice) elements.
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < s.split_dim; ++d) outer *= s.shape[d];
    for (size_t d = s.split_dim + 1; d < s.shape.size(); ++d) inner *= s.shape[d];
    const int64_t parts = s.split_parts;
    MT_CHECK(parts >= 1 && s.shape[s.split_dim] % parts == 0,
             "shard parameter {}: {} rows do not split into {} parts", s.name,
             s.shape[s.split_dim], parts);
    const int64_t local = s.shape[s.split_dim] / parts, whole = f.shape[s.split_dim] / parts;
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t k = 0; k < parts; ++k)
        runs.push_back({s.begin + (o * parts + k) * local * inner,
                        f.begin + (o * parts * whole + k * whole + tp_rank * local) * inner,
                        local * inner, false});
  }
  return runs;
}

void copy_logical_to_shard(const ParamLayout& full, const ParamLayout& shard, int tp_rank,
                           const float* full_buf, float* shard_buf) {
  for (const ShardRun& r : shard_runs(full, shard, tp_rank))
    std::memcpy(shard_buf + r.shard, full_buf + r.logical, sizeof(float) * r.count);
}

}  // namespace meshtrain
