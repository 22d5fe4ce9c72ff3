#include "meshtrain/train/evaluation.h"

#include <algorithm>

#include "meshtrain/core/error.h"
#include "meshtrain/telemetry/trace_writer.h"

namespace meshtrain {

MicroBatch micro_batch_of(const data::Batch& b) {
  MicroBatch m;
  m.B = static_cast<int>(b.inputs.dim(0));
  if (b.inputs.dtype() == DType::I32) {
    m.inputs = b.inputs.data<int32_t>();
    m.T = static_cast<int>(b.inputs.dim(1));
  } else {
    MT_CHECK(b.inputs.dtype() == DType::F32, "a batch's inputs are int32 token ids or f32 samples");
    m.features = b.inputs.data<float>();
    m.T = 1;
  }
  m.targets = b.targets.numel() > 0 ? b.targets.data<int32_t>() : nullptr;
  return m;
}

namespace {

// Restores training mode however the evaluation ends.
struct EvaluationMode {
  Model& model;
  bool was;
  explicit EvaluationMode(Model& m) : model(m), was(m.training()) { model.set_training(false); }
  ~EvaluationMode() { model.set_training(was); }
};

// Adds one forward's measures into `sums` (same names, same order each time).
void add_metrics(const std::vector<MetricSum>& now, std::vector<MetricSum>& sums) {
  if (sums.empty()) {
    sums = now;
    return;
  }
  MT_CHECK(now.size() == sums.size(), "a model reported {} measures after {} before", now.size(),
           sums.size());
  for (size_t i = 0; i < now.size(); ++i) {
    sums[i].sum += now[i].sum;
    sums[i].count += now[i].count;
  }
}

}  // namespace

Evaluation evaluate(const std::function<float(const MicroBatch&)>& forward, Model& model,
                    const Model* metrics_model, data::BatchSource& val, int64_t batches,
                    comm::Communicator* comm) {
  telemetry::TraceScope trace(telemetry::global_tracer(), "eval", "compute");
  EvaluationMode mode(model);
  val.rewind();
  const bool weighted = val.masked();
  double sum = 0.0, targets = 0.0;
  std::vector<MetricSum> measures;
  const int64_t n = std::min<int64_t>(batches, val.batches_per_epoch());
  for (int64_t i = 0; i < n; ++i) {
    data::Batch b = val.next();
    const float mean = forward(micro_batch_of(b));
    if (metrics_model) add_metrics(metrics_model->metrics(), measures);
    if (!weighted) {
      sum += mean;
      continue;
    }
    const int32_t* t = b.targets.data<int32_t>();
    int64_t counted = 0;
    for (int64_t j = 0; j < b.targets.numel(); ++j) counted += t[j] >= 0;
    sum += static_cast<double>(mean) * counted;
    targets += static_cast<double>(counted);
  }
  Evaluation e;
  if (n == 0) return e;
  if (!measures.empty()) {
    std::vector<double> totals;
    for (const MetricSum& m : measures) totals.push_back(m.sum), totals.push_back(m.count);
    if (comm) comm->allreduce(totals.data(), totals.size(), DType::F64).wait();
    for (size_t i = 0; i < measures.size(); ++i)
      e.metrics.emplace_back(measures[i].name,
                             totals[2 * i + 1] > 0 ? totals[2 * i] / totals[2 * i + 1] : 0.0);
  }
  if (weighted) {
    if (comm) {
      sum = comm->allreduce_scalar(sum, comm::ReduceOp::Sum);
      targets = comm->allreduce_scalar(targets, comm::ReduceOp::Sum);
    }
    e.loss = targets > 0 ? static_cast<float>(sum / targets) : -1.f;
    return e;
  }
  const double mean = sum / n;
  e.loss = static_cast<float>(comm ? comm->allreduce_scalar(mean, comm::ReduceOp::Avg) : mean);
  return e;
}

}  // namespace meshtrain
