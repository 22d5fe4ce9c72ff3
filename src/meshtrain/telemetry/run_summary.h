// End-of-run summary: the time breakdown table (median and mean per phase, %
// of the step), throughput, MFU, memory, cost, stragglers and losses, from the
// StepTelemetry records the trainer collected (rank 0).
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "meshtrain/telemetry/step_timer.h"

namespace meshtrain::telemetry {

// The breakdown table of a set of steps. Medians are per phase; "% of step"
// uses means, which add up to 100% with "other" (medians need not).
// `title` is the first line (e.g. "time per step (steps 2..100; step 1 is warm-up)").
std::string breakdown_table(const BreakdownStats& s, const std::string& title);

// The steps a summary aggregates: all but the first (warm-up) when there are
// at least 3 steps.
size_t first_steady_step(size_t n_steps);

class RunSummary {
 public:
  void add(const StepTelemetry& t);
  int64_t steps() const { return static_cast<int64_t>(times_.size()); }
  // Breakdown of the steady steps (warm-up excluded, see first_steady_step).
  BreakdownStats breakdown() const;
  // The whole multi-line summary printed at the end of a run.
  std::string text() const;
  nlohmann::json to_json() const;

 private:
  std::vector<StepBreakdown> times_;
  std::vector<double> tokens_per_s_, samples_per_s_, tflops_, mfu_;
  double last_loss_ = 0, best_loss_ = 0;
  int64_t last_step_ = 0, best_step_ = 0;
  std::optional<double> last_val_, best_val_;
  int64_t best_val_step_ = 0;
  double peak_mem_bytes_ = 0;
  double price_ = 0, usd_tok_sum_ = 0, usd_samp_sum_ = 0;
  int64_t tokens_ = 0, samples_ = 0;
  int devices_ = 1;
  bool per_sample_ = false;  // images: throughput in samples/s only
  // Straggler tally: how often each rank was slowest, and lag sums.
  std::vector<int64_t> slowest_count_;
  double lag_sum_s_ = 0, lag_max_s_ = 0;
  int64_t straggler_steps_ = 0;
};

}  // namespace meshtrain::telemetry
