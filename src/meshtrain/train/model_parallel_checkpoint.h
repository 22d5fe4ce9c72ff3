// Checkpoints under tensor and pipeline parallelism stay in the logical
// layout, the one a single-rank run writes, so a run resumes at any (dp, tp,
// pp) and every checkpoint tool (inspect, export, init_from) reads them
// unchanged.
//
// Saving: each flat buffer's elements live in pieces of the model-parallel
// shards, one per (pp stage, tp rank): a split tensor's slices, a whole
// tensor on every tp shard, a stage's own layers; under ZeRO, in one dp
// rank's range of a shard. to_logical_block moves them so that world rank w
// ends up with elements shard_range(N, W, w) of the logical buffer, the range
// the checkpoint writer has it write: every piece goes from the rank that
// holds it (its own dp group first) straight to the rank that writes it,
// over the world's point-to-point lanes. Whole tensors come from tp rank 0,
// a tensor two stages hold (a tied embedding) from the first.
//
// Resuming: each shard reads its runs from their logical ranges (fills).
// Also used for the final model file under tp alone: gather_whole.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "meshtrain/ckpt/resume.h"
#include "meshtrain/nn/model.h"
#include "meshtrain/nn/shard_slicing.h"
#include "meshtrain/parallel/mesh.h"

namespace meshtrain {

class ModelParallelCheckpoint {
 public:
  // `logical`: the whole model; `shards[pp * tp + t]` the spec of stage pp's
  // tp shard t (pipeline_shards' ranges; one stage without pipeline
  // parallelism); the mesh gives this rank's coordinates.
  ModelParallelCheckpoint(std::shared_ptr<const ModelSpec> logical,
                          const std::vector<std::shared_ptr<const ModelSpec>>& shards,
                          const parallel::Mesh& mesh);

  int64_t logical_numel() const { return logical_->num_params(); }
  const ParamLayout& logical_layout() const { return logical_->layout(); }
  // This rank's range of the logical buffer in a checkpoint of the world.
  ckpt::ElemRange block() const;
  // Collective over the world: `held` (elements [held.begin, held.end) of
  // this rank's shard buffer, starting at `data`) redistributed; returns this
  // rank's block() of the logical buffer.
  std::vector<float> to_logical_block(const float* data, ckpt::ElemRange held) const;
  // Collective over the tp group (one pipeline stage only): the whole
  // model's flat buffer assembled from every tp shard's full buffer (`mine`).
  Tensor gather_whole(const Tensor& mine) const;
  // Fill requests that read `wanted` (a range of this shard's buffer, whose
  // element wanted.begin is at `dst`) from a logical checkpoint.
  std::vector<ckpt::FillRequest> fills(const std::string& buffer, ckpt::ElemRange wanted, float* dst,
                                       bool zero_if_absent) const;

 private:
  std::shared_ptr<const ModelSpec> logical_;
  parallel::Mesh mesh_;
  std::vector<std::vector<ShardRun>> runs_;  // per shard: runs_[pp * tp + t]
  int shard_index(int pp, int t) const { return pp * mesh_.size(parallel::Axis::TP) + t; }
};

}  // namespace meshtrain
