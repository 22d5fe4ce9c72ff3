// What one rank of a pipeline holds: the spec of its stage (its layer range,
// as its tensor-parallel shard), or under an interleaved schedule the spec of
// its chunks together (nn/chunked_model.h), with the activation slots its
// schedule keeps. The trainer, the memory limit check and the memory report
// all ask here, so they agree on each rank's share.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "meshtrain/nn/model.h"
#include "meshtrain/plan/pipeline_schedule.h"

namespace meshtrain::parallel {

struct PipelineLayout {
  plan::PipeSchedule schedule = plan::PipeSchedule::OneFOneB;
  int64_t stages = 1, chunks = 1, micro_batches = 1;
};

struct PipelineRankSpec {
  std::shared_ptr<const ModelSpec> spec;
  // The slots to predict its memory with (predict_training_memory): the
  // stage's under one chunk; 1 for a ChunkedSpec, which counts each chunk's.
  int activation_slots = 1;
  // Zero-bubble: each backward split in two, each slot holding the queued
  // weight GEMMs' operands (predict_training_memory's split_backward).
  bool split_backward = false;
};

// Every virtual stage (stages x chunks, in pipeline order) as tensor-parallel
// shard tp_rank of tp_size of `whole`.
std::vector<std::shared_ptr<const ModelSpec>> pipeline_virtual_stage_specs(
    const ModelSpec& whole, const PipelineLayout& layout, int tp_rank, int tp_size);

// Stage `stage`'s part of `whole` (tp shard tp_rank of tp_size).
PipelineRankSpec pipeline_rank_spec(const ModelSpec& whole, const PipelineLayout& layout,
                                    int64_t stage, int tp_rank, int tp_size);

}  // namespace meshtrain::parallel
