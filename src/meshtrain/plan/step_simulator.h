// Event-driven simulation of one training step of a planned layout: every
// rank's ops on its own timelines, so stragglers, the pipeline's fill and
// drain and collectives waiting for their last participant show up as time
// rather than as a formula.
//
// Op times come from the analytic model (evaluate_layout's TimeBreakdown for
// the slowest stage; every stage takes them): per micro-batch and chunk a
// forward is a third of the compute, a backward two thirds plus the
// recompute, each with its share of the tensor-parallel collectives (4 per
// layer, 6 with full recompute: 2 forward, the rest backward; inside the op,
// so a tp group moves together at its slowest member). Pipeline sends (one
// per boundary and micro-batch, on a link per direction) take
// pp_comm / (2 v (m + pp - 2)) each. The pipeline order is
// pipeline_schedule.h's. The data-parallel reduction goes in 25 MiB buckets
// on each rank's comm stream, released evenly across the step's backwards
// (the planner's overlap assumption; without overlap, after the last
// backward); a bucket starts when the last replica has released it and every
// participant's comm stream is free. ZeRO gathers come one piece per op,
// issued at the previous op's start (forwards for stages 1-3, backwards too
// for stage 3). The optimizer update runs after the stage's last bucket.
//
// Stragglers slow a rank's compute and update by a factor; jitter multiplies
// each op on each rank by a log-normal factor of mean 1.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "meshtrain/plan/pipeline_schedule.h"
#include "meshtrain/plan/planner.h"

namespace meshtrain::plan {

struct SimOptions {
  std::map<int64_t, double> stragglers;  // rank -> slowdown (1.5: its ops take 1.5x)
  double jitter_sigma = 0;               // log-normal sigma per op and rank; 0: none
  uint64_t seed = 1;
  std::optional<PipeSchedule> schedule;  // default: interleaved with chunks > 1, else 1F1B
  std::string trace_path;                // write a Perfetto/Chrome trace JSON when set
  // Ranks the trace shows. Empty: all up to 64 ranks; beyond, replica 0's
  // first and last stage (tp rank 0), each straggler and a data-parallel peer of it.
  std::vector<int64_t> trace_ranks;
};

// A rank's step, in seconds; the parts add up to the step.
struct RankTime {
  int64_t rank = 0, dp = 0, tp = 0, pp = 0;
  double compute = 0;       // its forward, backward and recompute work
  double tp_comm = 0;       // tensor-parallel collectives inside its ops
  double tp_wait = 0;       // inside ops, waiting for a slower tp peer
  double optimizer = 0;
  double bubble = 0;        // idle before its last op: pipeline fill and drain, sends, slower stages
  double exposed_comm = 0;  // idle while its data-parallel collectives or ZeRO gathers run
  double tail_wait = 0;     // idle after its work: waiting at a collective for a slower peer, or for the step's end
  double busy() const { return compute + tp_comm + optimizer; }
  double idle() const { return tp_wait + bubble + exposed_comm + tail_wait; }
};

struct CriticalSegment {
  std::string what;     // "forward/backward", "pipeline send", "dp reduce", "zero gather", "optimizer"
  int64_t stage = 0;
  int64_t replica = -1;  // -1: a collective over every replica
  double seconds = 0;
};

struct SimResult {
  PlanRow analytic;
  PipeSchedule schedule = PipeSchedule::OneFOneB;
  double step = 0;                 // simulated seconds
  std::vector<RankTime> ranks;     // every rank
  RankTime mean;                   // averaged over ranks (rank fields 0)
  double stage0_in_flight = 0;     // micro-batches stage 0 holds at its peak
  // The chain of ops that sets the step's length, from t = 0: consecutive
  // ops of one kind on one cell merged; by_kind sums it per kind.
  std::vector<CriticalSegment> critical_path;
  std::vector<std::pair<std::string, double>> critical_by_kind;
  int64_t tasks = 0;               // simulated ops
  double seconds = 0;              // wall time of the simulation (not writing the trace)
  std::vector<int64_t> traced_ranks;
};

// Throws meshtrain::Error for a straggler outside the ranks or with a factor
// <= 0, and for a schedule the layout cannot run.
SimResult simulate_step(const PlanRequest& request, const Layout& layout, const SimOptions& options = {});

}  // namespace meshtrain::plan
