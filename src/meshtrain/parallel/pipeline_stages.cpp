#include "meshtrain/parallel/pipeline_stages.h"

#include "meshtrain/nn/chunked_model.h"
#include "meshtrain/parallel/pipeline_executor.h"

namespace meshtrain::parallel {

std::vector<std::shared_ptr<const ModelSpec>> pipeline_virtual_stage_specs(
    const ModelSpec& whole, const PipelineLayout& layout, int tp_rank, int tp_size) {
  std::vector<std::shared_ptr<const ModelSpec>> out;
  for (ModelShard shard : pipeline_shards(whole.num_layers(), layout.stages, layout.chunks)) {
    shard.tp_rank = tp_rank;
    shard.tp_size = tp_size;
    out.push_back(whole.sharded(shard));
  }
  return out;
}

PipelineRankSpec pipeline_rank_spec(const ModelSpec& whole, const PipelineLayout& layout,
                                    int64_t stage, int tp_rank, int tp_size) {
  const auto all = pipeline_virtual_stage_specs(whole, layout, tp_rank, tp_size);
  const std::vector<int> slots = pipeline_activation_slots(layout.schedule, layout.stages,
                                                           layout.micro_batches, layout.chunks, stage);
  const bool split = layout.schedule == plan::PipeSchedule::ZeroBubbleH1;
  if (layout.chunks == 1) return {all[static_cast<size_t>(stage)], slots[0], split};
  std::vector<std::shared_ptr<const ModelSpec>> mine;
  for (int64_t c = 0; c < layout.chunks; ++c)
    mine.push_back(all[static_cast<size_t>(plan::virtual_stage(stage, c, layout.stages))]);
  return {std::make_shared<ChunkedSpec>(std::move(mine), slots), 1, split};
}

}  // namespace meshtrain::parallel
