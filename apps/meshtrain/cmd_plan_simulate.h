// `meshtrain plan --simulate [--trace FILE] [--straggler RANK:FACTOR]...` and
// the failure section (`--mtbf-hours H [--checkpoint-s S] [--restart-s S]`),
// printed after the ranked layouts for the first one (cmd_plan_simulate.cpp).
#pragma once
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "meshtrain/plan/planner.h"

namespace meshtrain::cli {

struct SimulateOptions {
  bool simulate = false;
  std::string trace;                    // implies simulate
  std::vector<std::string> stragglers;  // "RANK:FACTOR"; imply simulate
  double jitter = 0;
  uint64_t seed = 1;
  std::optional<double> mtbf_hours;     // per GPU; the failure section when given
  double checkpoint_s = 60, restart_s = 300;
};

void add_simulate_options(CLI::App* plan, SimulateOptions& o);
// Throws UsageError for bad flags (before any planning): straggler syntax,
// a rank outside the GPUs, factors, MTBF and costs out of range.
void check_simulate_options(const SimulateOptions& o, int64_t gpus);
// The sections for the top-ranked row; nothing when not asked for.
void print_simulate_sections(const plan::PlanRequest& req, const plan::PlanRow& row, const SimulateOptions& o);
void add_simulate_json(nlohmann::json& out, const plan::PlanRequest& req, const plan::PlanRow& row,
                       const SimulateOptions& o);

}  // namespace meshtrain::cli
