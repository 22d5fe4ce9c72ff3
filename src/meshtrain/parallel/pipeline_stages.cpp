#include "meshtrain/parallel/pipeline_stages.h"

#include <algorithm>
#include <string>

#include "meshtrain/core/error.h"

#include "meshtrain/nn/chunked_model.h"
#include "meshtrain/parallel/pipeline_executor.h"
#include "meshtrain/plan/stage_cut.h"

namespace meshtrain::parallel {

std::vector<int> parse_stage_layers(const std::string& text, const std::string& what) {
  std::vector<int> out;
  if (text.empty()) return out;
  for (size_t at = 0; at <= text.size();) {  // every item, the empty ones too
    const size_t end = std::min(text.find(',', at), text.size());
    const std::string item = text.substr(at, end - at);
    MT_CHECK(!item.empty() && item.size() <= 6 && item.find_first_not_of("0123456789") == std::string::npos &&
                 std::stoi(item) >= 1,
             "{} must be layer counts >= 1 separated by commas, such as \"3,3\"; got \"{}\"", what, text);
    out.push_back(std::stoi(item));
    at = end + 1;
  }
  return out;
}

std::vector<int> pipeline_stage_layers(const ModelSpec& whole, const PipelineLayout& layout) {
  const int L = whole.num_layers();
  const int64_t V = layout.stages * layout.chunks;
  MT_CHECK(V >= 1 && L >= V, "pipeline of {} stage(s) x {} chunk(s) needs at least {} layers; "
           "the model has {}", layout.stages, layout.chunks, V, L);
  if (!layout.stage_layers.empty()) {
    MT_CHECK(static_cast<int64_t>(layout.stage_layers.size()) == V, "parallel.stage_layers gives {} "
             "virtual stage(s); parallel.pp = {} x parallel.chunks = {} needs {}",
             layout.stage_layers.size(), layout.stages, layout.chunks, V);
    int sum = 0;
    for (int n : layout.stage_layers) sum += n;
    MT_CHECK(sum == L, "parallel.stage_layers adds up to {} layers; the model has {}", sum, L);
    return layout.stage_layers;
  }
  const ModelSpec::StageCosts c = whole.stage_costs(layout.seq > 0 ? layout.seq : whole.seq_len());
  return plan::cut_layers_by_cost(L, static_cast<int>(V), {c.layer, c.first, c.last});
}

std::vector<std::shared_ptr<const ModelSpec>> pipeline_virtual_stage_specs(
    const ModelSpec& whole, const PipelineLayout& layout, int tp_rank, int tp_size,
    bool sequence_parallel) {
  const std::vector<int> layers = pipeline_stage_layers(whole, layout);
  std::vector<std::shared_ptr<const ModelSpec>> out;
  int begin = 0;
  for (size_t vs = 0; vs < layers.size(); ++vs) {
    ModelShard shard;
    shard.layer_begin = begin;
    shard.layer_end = begin + layers[vs];
    shard.first_stage = vs == 0;
    shard.last_stage = vs + 1 == layers.size();
    shard.tp_rank = tp_rank;
    shard.tp_size = tp_size;
    shard.sequence_parallel = sequence_parallel;
    out.push_back(whole.sharded(shard));
    begin = shard.layer_end;
  }
  return out;
}

PipelineRankSpec pipeline_rank_spec(const ModelSpec& whole, const PipelineLayout& layout,
                                    int64_t stage, int tp_rank, int tp_size, bool sequence_parallel) {
  const auto all = pipeline_virtual_stage_specs(whole, layout, tp_rank, tp_size, sequence_parallel);
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
