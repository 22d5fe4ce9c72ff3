// What one rank of a pipeline holds: the spec of its stage (its layer range,
// as its tensor-parallel shard), or under an interleaved schedule the spec of
// its chunks together (nn/chunked_model.h), with the activation slots its
// schedule keeps. The trainer, the memory limit check and the memory report
// all ask here, so they agree on each rank's share.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "meshtrain/nn/model.h"
#include "meshtrain/plan/pipeline_schedule.h"

namespace meshtrain::parallel {

struct PipelineLayout {
  plan::PipeSchedule schedule = plan::PipeSchedule::OneFOneB;
  int64_t stages = 1, chunks = 1, micro_batches = 1;
  // Layers of each virtual stage in pipeline order (parallel.stage_layers);
  // empty: balanced by cost at context `seq`.
  std::vector<int> stage_layers;
  int seq = 0;
};

// The layer count of each of the stages x chunks virtual stages: the
// explicit ones when given (checked against the model), else the
// contiguous split whose most expensive virtual stage is cheapest by
// whole.stage_costs(seq) (the embedding and the head counted, so a large
// vocabulary's last stage gets fewer layers), the earlier stages a layer
// longer on ties; even when the family gives no costs.
std::vector<int> pipeline_stage_layers(const ModelSpec& whole, const PipelineLayout& layout);

// "3,3" -> {3, 3}; empty -> {}; anything else an Error naming `what`.
std::vector<int> parse_stage_layers(const std::string& text, const std::string& what);

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
// shard tp_rank of tp_size of `whole` (with sequence parallelism).
std::vector<std::shared_ptr<const ModelSpec>> pipeline_virtual_stage_specs(
    const ModelSpec& whole, const PipelineLayout& layout, int tp_rank, int tp_size,
    bool sequence_parallel = false);

// Stage `stage`'s part of `whole` (tp shard tp_rank of tp_size).
PipelineRankSpec pipeline_rank_spec(const ModelSpec& whole, const PipelineLayout& layout,
                                    int64_t stage, int tp_rank, int tp_size,
                                    bool sequence_parallel = false);

}  // namespace meshtrain::parallel
