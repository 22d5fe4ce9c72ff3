#include "meshtrain/nn/shard_slicing.h"

#include <cstring>

#include "meshtrain/core/error.h"

namespace meshtrain {

std::vector<ShardRun> shard_runs(const ParamLayout& full, const ParamLayout& shard, int tp_rank) {
  MT_CHECK(full.params.size() == shard.params.size(),
           "shard layout has {} parameters, the model {}", shard.params.size(), full.params.size());
  std::vector<ShardRun> runs;
  for (size_t i = 0; i < full.params.size(); ++i) {
    const ParamInfo& f = full.params[i];
    const ParamInfo& s = shard.params[i];
    MT_CHECK(f.name == s.name && f.shape == s.logical_shape(),
             "shard parameter {} does not match the model's {}", s.name, f.name);
    if (s.split_dim < 0) {
      runs.push_back({s.begin, f.begin, s.numel(), true});
      continue;
    }
    // Row-major: the split dimension's slice is `outer` runs of `inner` elements.
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < s.split_dim; ++d) outer *= s.shape[d];
    for (size_t d = s.split_dim + 1; d < s.shape.size(); ++d) inner *= s.shape[d];
    const int64_t local = s.shape[s.split_dim], whole = f.shape[s.split_dim];
    for (int64_t o = 0; o < outer; ++o)
      runs.push_back({s.begin + o * local * inner, f.begin + (o * whole + tp_rank * local) * inner,
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
