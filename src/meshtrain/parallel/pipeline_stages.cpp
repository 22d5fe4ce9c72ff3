#include "meshtrain/parallel/pipeline_stages.h"

#include <algorithm>
#include <limits>
#include <string>

#include "meshtrain/core/error.h"

#include "meshtrain/nn/chunked_model.h"
#include "meshtrain/parallel/pipeline_executor.h"

namespace meshtrain::parallel {

namespace {

// The even split's layer counts.
std::vector<int> even_layers(int n_layer, int64_t V) {
  std::vector<int> out;
  for (const ModelShard& s : pipeline_shards(n_layer, V, 1)) out.push_back(s.layer_end - s.layer_begin);
  return out;
}

// Minimizes the largest virtual stage cost over contiguous splits (dynamic
// programming over (stages, layers)); the last stages take the fewest
// layers that reach the optimum, so ties lengthen the earlier ones.
std::vector<int> balanced_layers(int L, int V, const ModelSpec::StageCosts& c) {
  auto cost = [&](int v, int n) {
    return n * c.layer + (v == 0 ? c.first : 0.0) + (v == V - 1 ? c.last : 0.0);
  };
  const double inf = std::numeric_limits<double>::infinity();
  // best[v][i]: the first v virtual stages over the first i layers.
  std::vector<std::vector<double>> best(static_cast<size_t>(V + 1), std::vector<double>(static_cast<size_t>(L + 1), inf));
  best[0][0] = 0;
  for (int v = 1; v <= V; ++v)
    for (int i = v; i <= L; ++i)
      for (int n = 1; n <= i - (v - 1); ++n)
        best[v][i] = std::min(best[v][i], std::max(best[v - 1][i - n], cost(v - 1, n)));
  std::vector<int> out(static_cast<size_t>(V));
  for (int v = V, i = L; v >= 1; --v)
    for (int n = 1; n <= i - (v - 1); ++n)
      if (std::max(best[v - 1][i - n], cost(v - 1, n)) <= best[v][i] * (1 + 1e-12)) {
        out[static_cast<size_t>(v - 1)] = n;
        i -= n;
        break;
      }
  return out;
}

}  // namespace

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
  if (c.layer <= 0) return even_layers(L, V);
  return balanced_layers(L, static_cast<int>(V), c);
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
