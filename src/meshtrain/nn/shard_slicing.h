// Between a model's logical (unsharded) parameters and one tensor-parallel
// shard's: both layouts list the same parameters in the same order; a split
// parameter (ParamInfo::split_dim >= 0) of shard r is slice r of its
// logical tensor along that dimension, a replicated one is the whole tensor.
// Used to initialise a shard exactly like the whole model, and by tests and
// checkpoints to compare and assemble shards.
#pragma once
#include <vector>

#include "meshtrain/nn/model.h"

namespace meshtrain {

// A run of consecutive elements a shard holds that are also consecutive in
// the logical buffer.
struct ShardRun {
  int64_t shard = 0, logical = 0, count = 0;  // offsets in the two flat buffers
  bool replicated = false;                    // a whole (unsplit) parameter: every shard holds it
};
// Tensor-parallel rank tp_rank's runs, in its buffer's order (tiling it).
std::vector<ShardRun> shard_runs(const ParamLayout& full, const ParamLayout& shard, int tp_rank);

// shard_buf (shard.numel) = this rank's slices of full_buf (full.numel).
void copy_logical_to_shard(const ParamLayout& full, const ParamLayout& shard, int tp_rank,
                           const float* full_buf, float* shard_buf);

}  // namespace meshtrain
