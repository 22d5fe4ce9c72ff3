// Where a pipeline's layers are cut into virtual stages: the engine cuts a
// model by it (parallel/pipeline_stages.h) and the planner times the stages
// it gives (plan/planner.h), so the two agree on every stage's layers.
#pragma once
#include <cstdint>
#include <vector>

#include "meshtrain/plan/transformer_shape.h"

namespace meshtrain::plan {

// Per token: a layer's cost, and what the first virtual stage (the
// embedding) and the last (the head and its loss) add. Model FLOPs.
struct StageCost {
  double layer = 0, first = 0, last = 0;
};

// A planned transformer's costs at context `seq` (the engine's decoders
// give theirs by ModelSpec::stage_costs, the same formula): the head's
// GEMMs over the vocabulary on the last stage, the rest spread over the layers.
StageCost transformer_stage_cost(const TransformerShape& m, int64_t seq);

// The layer count of each of `virtual_stages` contiguous stages over
// `layers` whose costliest stage is cheapest (ties lengthen the earlier
// stages); an even split when the costs are unknown (layer <= 0).
// Needs 1 <= virtual_stages <= layers.
std::vector<int> cut_layers_by_cost(int layers, int virtual_stages, const StageCost& cost);

// What pipeline rank `stage` of `stages` holds of a cut over stages x chunks
// virtual stages (chunk c is virtual stage c x stages + stage): its layers,
// and whether it holds the first and the last virtual stage.
struct RankShare {
  int layers = 0;
  bool first = false, last = false;
};
RankShare rank_share(const std::vector<int>& cut, int stages, int stage);

}  // namespace meshtrain::plan
