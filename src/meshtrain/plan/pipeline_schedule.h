// Pipeline schedules: the ordered forward and backward ops each of `stages`
// pipeline stages runs for `micro_batches` micro-batches of one step, each
// stage holding `chunks` model chunks (virtual stages; 1 unless interleaved).
//
//  - GPipe (Huang et al. 2019): every forward, then every backward; a stage
//    holds all m micro-batches' activations.
//  - 1F1B (PipeDream-flush, Narayanan et al. 2021): stage s runs
//    stages - s - 1 warm-up forwards, then alternates one forward and one
//    backward, then the remaining backwards; at most `stages` micro-batches
//    in flight, the same bubble as GPipe.
//  - Interleaved 1F1B (Narayanan et al. 2021, Sec. 2.2; Megatron-LM's order):
//    virtual stage c * stages + s is chunk c on stage s; micro-batches go in
//    rounds of `stages` through the chunks, so m % stages == 0; the bubble
//    shrinks by the chunk count.
//  - ZB-H1 (zero bubble, after Qi et al. 2023): each backward split into
//    its input-gradient part B (what the previous stage waits for) and its
//    weight-gradient part W (which nobody waits for), W deferred into what
//    would be bubble. The order comes from a list scheduler over unit op
//    times (B before F before W when several are ready) with 1F1B's depth
//    for B and at most `stages` micro-batches held until their W on every
//    stage (1F1B's first stage), so it is dependency-correct for every
//    (stages, micro-batches); its bubble is below 1F1B's (about 0.55x at
//    p = 4, m = 8 with equal F, B, W), not yet the paper's handcrafted 1/3.
//
// Deliberately free of planner types: the step simulator replays these, and
// the engine's pipeline-parallel executor runs the same generator through
// pipeline_instructions(), so the plan and the run agree op for op.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace meshtrain::plan {

enum class PipeSchedule { GPipe, OneFOneB, Interleaved, ZeroBubbleH1 };
const char* pipe_schedule_name(PipeSchedule s);
// "gpipe", "1f1b", "interleaved" or "zb-h1"; anything else is an Error listing them.
PipeSchedule parse_pipe_schedule(const std::string& name);

// Which part of a backward an op runs: all of it, or (zero-bubble
// schedules) only the input gradient or only the weight gradient.
enum class BackwardPart { Whole, Input, Weight };

struct PipeOp {
  bool forward = true;
  int64_t micro_batch = 0;
  int64_t chunk = 0;
  BackwardPart part = BackwardPart::Whole;  // backward ops only
  bool operator==(const PipeOp&) const = default;
  // The op the previous virtual stage waits for: a forward, or a backward
  // that produces the input gradient (Whole or Input).
  bool sends_input_grad() const { return !forward && part != BackwardPart::Weight; }
};
// "F3", "B3", "b3" (input part), "w3" (weight part); chunk c > 0 appends ".c".
std::string pipe_op_label(const PipeOp& op);

// ops[s]: stage s's ops in order. Throws (meshtrain::Error) on stages,
// micro_batches or chunks < 1, on 1F1B with chunks > 1 (that is
// Interleaved), and on Interleaved with micro_batches % stages != 0. GPipe
// with chunks runs the forwards chunk by chunk, the backwards in reverse.
std::vector<std::vector<PipeOp>> pipeline_schedule(PipeSchedule kind, int64_t stages,
                                                   int64_t micro_batches, int64_t chunks);

// The virtual stage (position along the pipeline) of `chunk` on `stage`.
inline int64_t virtual_stage(int64_t stage, int64_t chunk, int64_t stages) {
  return chunk * stages + stage;
}

// The largest number of (micro-batch, chunk) forwards a stage holds before
// their backward finishes (the whole backward, or its weight part: the
// activations are needed until then), in micro-batches: pairs / chunks.
double peak_in_flight(const std::vector<PipeOp>& stage_ops, int64_t chunks);

// Replays a schedule with fixed op times and free, instant sends: a forward
// waits for the previous virtual stage's forward of its micro-batch, a
// backward (whole or input part) for the next virtual stage's input
// gradient (the last for its own forward), a weight part for its own
// input part. Throws naming the stuck stages when the order deadlocks.
// A split backward costs backward_s in all: its input part input_share of
// it, its weight part the rest.
struct OpTiming {
  PipeOp op;
  double start = 0, end = 0;
};
struct ScheduleReplay {
  double makespan = 0;
  double bubble_fraction = 0;  // idle / (stages x makespan)
  double bubble_ratio = 0;     // idle / busy, summed over stages: formula_bubble's measure
  std::vector<std::vector<OpTiming>> timeline;  // per stage, in its order
};
ScheduleReplay replay_schedule(const std::vector<std::vector<PipeOp>>& ops, int64_t chunks,
                               double forward_s, double backward_s, double input_share = 0.5);

// The schedule's bubble by the textbook formula: (p - 1) / m for GPipe and
// 1F1B, (p - 1) / (v m) interleaved, as a fraction of the ideal step
// (bubble time over compute time); ZB-H1: 1F1B's, its upper bound.
double formula_bubble(PipeSchedule kind, int64_t stages, int64_t micro_batches, int64_t chunks);

// What a run should expect, for its log: "the 1f1b formula: 12.5%", or for
// ZB-H1 (no closed form) its replay with equal forward, input- and
// weight-gradient times beside 1F1B's formula, which bounds it.
std::string expected_bubble(PipeSchedule kind, int64_t stages, int64_t micro_batches, int64_t chunks);

}  // namespace meshtrain::plan
