// Evaluation on held-out batches, for any model and any batch source: the
// mean loss and the model's other measures (top-1, top-5) over the first
// batches of the source, each data-parallel rank its slice, in the model's
// evaluation mode.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "meshtrain/comm/communicator.h"
#include "meshtrain/data/batch_source.h"
#include "meshtrain/nn/model.h"

namespace meshtrain {

// The model's view of a source's batch: token windows as inputs (B, T),
// dense samples as features with T = 1.
MicroBatch micro_batch_of(const data::Batch& batch);

struct Evaluation {
  float loss = -1.f;  // -1: no batch evaluated
  // Each measure's sum over every sample of every rank divided by its count
  // (a fraction: 0.917 is 91.7% top-1), in the model's order.
  std::vector<std::pair<std::string, double>> metrics;
};

// Rewinds `val` and evaluates its first `batches` global batches. `forward`
// runs one micro-batch (through the pipeline when there is one) and returns
// its mean loss; `model` is put in evaluation mode meanwhile and, unless
// null, `metrics_model` is asked for its measures after each forward (every
// rank of `comm` must pass the same kind of model, or null). With `comm`
// (the data-parallel group; null with one rank) losses are averaged and
// measures summed over its ranks. Masked sources average by counted targets.
Evaluation evaluate(const std::function<float(const MicroBatch&)>& forward, Model& model,
                    const Model* metrics_model, data::BatchSource& val, int64_t batches,
                    comm::Communicator* comm);

}  // namespace meshtrain
