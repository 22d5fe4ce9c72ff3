// Per-step time breakdown, throughput, MFU, cost and straggler numbers.
//
// Convention (what "adds up" means):
//   step = data_wait + forward + backward + optimizer + comm_exposed + other
// comm_exposed is communication the step waited for (not hidden behind
// compute); comm_total is all communication time, most of it overlapped with
// backward, so it is reported beside the parts and is NOT one of them.
// `other` is what the timers did not attribute (loop overhead, logging,
// gaps). Parts must not exceed the step: other >= -tolerance, with
// kBreakdownTolerance (1% of the step + 50 µs) for timer granularity.
#pragma once
#include <algorithm>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace meshtrain {
struct ProgressState;
}

namespace meshtrain::telemetry {

struct StepBreakdown {
  double data_wait_s = 0, forward_s = 0, backward_s = 0, optimizer_s = 0;
  double comm_exposed_s = 0;  // part of the step
  double comm_total_s = 0;    // reported beside; overlaps forward/backward
  double step_s = 0;
  // The tensor-parallel part of comm_exposed (and of comm_total): collectives
  // inside forward and backward that block compute. The data-parallel part
  // is comm_exposed_s - comm_tp_s.
  double comm_tp_s = 0;
  // Pipeline parallelism: blocked on the neighbouring stages (the bubble and
  // the transfers); forward_s then holds forward and backward together.
  double pp_wait_s = 0;

  double parts_s() const {
    return data_wait_s + forward_s + backward_s + optimizer_s + comm_exposed_s + pp_wait_s;
  }
  double other_s() const { return step_s - parts_s(); }
  // Fraction of comm_total that was hidden behind compute (1 when no comm).
  double comm_overlap() const {
    return comm_total_s > 0 ? 1.0 - std::min(comm_exposed_s, comm_total_s) / comm_total_s : 1.0;
  }
  // True when the parts do not exceed the step by more than the tolerance.
  bool adds_up(double rel_tol = 0.01, double abs_tol_s = 50e-6) const {
    return other_s() >= -(rel_tol * step_s + abs_tol_s);
  }
};

// The tolerance stated in the convention above.
constexpr double kBreakdownRelTol = 0.01;
constexpr double kBreakdownAbsTolS = 50e-6;

// Phases of a step, in the order the breakdown table lists them.
enum class Phase { DataWait, Forward, Backward, Optimizer, CommExposed };

// Times a step by laps: each lap(p) attributes the time since the previous
// lap (or start) to phase p, so the parts of a lapped step sum to the step
// exactly (other = only what was added with add()).
//   StepTimer t; t.start();
//   ... next batch ...   t.lap(Phase::DataWait);
//   ... forward ...      t.lap(Phase::Forward);
//   StepBreakdown b = t.finish();
class StepTimer {
 public:
  static double now_s();  // steady clock, seconds
  void start();
  double lap(Phase p);                  // returns the lap's seconds
  void add(Phase p, double seconds);    // externally measured time (no lap)
  void add_comm_total(double seconds);  // overlapped communication
  StepBreakdown finish();               // step_s = now - start

 private:
  StepBreakdown b_;
  double t0_ = 0, last_ = 0;
};

// Median and mean of each field over a set of steps.
struct BreakdownStats {
  int64_t steps = 0;
  StepBreakdown median, mean;
};
BreakdownStats aggregate(const std::vector<StepBreakdown>& steps);
double median_of(std::vector<double> v);

// Model FLOPs per token = 6·N + 6·L·C·T (N parameters without position
// embeddings, L layers, C width, T context), forward + backward, as llm.c and
// PaLM count them (DESIGN.md).
double model_flops_per_token(int64_t n_params_no_pos, int n_layer, int n_embd, int seq_len);

// Cost of a step's work in dollars: price_per_device_hour × devices ×
// step_seconds / 3600, per million tokens (or samples) processed in the step.
double usd_per_million(double price_per_device_hour, int devices, double step_s, double items_per_step);

// Who held the step up: per-rank step times (gathered by the trainer), the
// slowest rank and its lag behind the median rank.
struct StragglerReport {
  int ranks = 0;
  int slowest_rank = -1, fastest_rank = -1;
  double slowest_s = 0, fastest_s = 0, median_s = 0;
  double lag_s = 0;    // slowest - median
  double lag_pct = 0;  // 100 × lag / median
  std::string describe() const;  // "rank 2 slowest: 130.0 ms, +30.0 ms (+30.0%) vs median 100.0 ms"
  nlohmann::json to_json() const;
};
StragglerReport straggler_report(const std::vector<double>& per_rank_step_s);

// Everything one step reports. The trainer fills the inputs; the rest derives.
struct StepTelemetry {
  int64_t step = 0;  // 1-based
  double loss = 0, lr = 0, grad_norm = 0;
  std::optional<double> val_loss;
  // Evaluation measures besides the loss, as fractions (name, value): "top1".
  std::vector<std::pair<std::string, double>> val_metrics;
  bool skipped = false;  // non-finite step, update skipped
  StepBreakdown time;
  // Work of the whole step across all data-parallel ranks.
  int64_t tokens = 0, samples = 0;
  bool per_sample = false;             // a model of dense samples (images): the progress counts samples
  int devices = 1;                     // ranks (devices) the step ran on
  double flops_per_token = 0;          // model_flops_per_token(); 0: no FLOP/MFU numbers
  double peak_flops_per_device = 0;    // measured GEMM rate (CPU) or datasheet (GPU); 0: no MFU
  double peak_mem_bytes = 0;           // per rank (allocator or RSS peak); 0: unknown
  double price_per_device_hour = 0;    // 0: no cost numbers
  std::optional<StragglerReport> straggler;
  // Bytes one rank sent to reduce this step's gradients, and what f32
  // gradients would have needed (comm/wire_bytes.h); < 0: not recorded.
  double grad_wire_bytes = -1, grad_dense_bytes = -1;

  double tokens_per_s() const { return time.step_s > 0 ? tokens / time.step_s : 0; }
  double samples_per_s() const { return time.step_s > 0 ? samples / time.step_s : 0; }
  double model_flops_per_s() const { return flops_per_token * tokens_per_s(); }
  // achieved ÷ (peak per device × devices); < 0 when unknown.
  double mfu() const;
  double usd_per_million_tokens() const;   // < 0 when no price
  double usd_per_million_samples() const;  // < 0 when no price

  // The metrics.jsonl record: step, loss, lr, grad_norm, step_ms, data_ms,
  // forward_ms, backward_ms, optimizer_ms, comm_exposed_ms, comm_total_ms,
  // other_ms, tokens_per_s, samples_per_s, model_tflops, mfu, peak_mem_mb,
  // usd_per_million_tokens/_samples, straggler_*, grad_wire_bytes,
  // grad_dense_bytes, val_loss and val_<measure> (when present).
  nlohmann::json to_json() const;
  // TensorBoard scalars: train/loss, train/lr, train/grad_norm, val/loss,
  // time/{step,data_wait,forward,backward,optimizer,comm_exposed,comm_total,other}_ms,
  // throughput/{tokens_per_s,samples_per_s,model_tflops,mfu}, memory/peak_mb,
  // cost/usd_per_million_{tokens,samples}, straggler/{lag_ms,slowest_rank}.
  std::vector<std::pair<std::string, double>> scalars() const;
  // Copies step, loss, lr, grad norm, val loss, step time, tokens/s, MFU,
  // communication and straggler numbers into the progress display's state
  // (total_steps and elapsed_s stay the caller's).
  void fill_progress(ProgressState& ps) const;
};

}  // namespace meshtrain::telemetry
