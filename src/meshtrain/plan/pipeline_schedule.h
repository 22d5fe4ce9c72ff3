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
//
// Deliberately free of planner types: the step simulator replays these, and
// the engine's pipeline-parallel executor (not written yet) is meant to run
// the same generator, so the plan and the run agree op for op.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace meshtrain::plan {

enum class PipeSchedule { GPipe, OneFOneB, Interleaved };
const char* pipe_schedule_name(PipeSchedule s);

struct PipeOp {
  bool forward = true;
  int64_t micro_batch = 0;
  int64_t chunk = 0;
  bool operator==(const PipeOp&) const = default;
};

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
// their backward (activation memory), in micro-batches: pairs / chunks.
double peak_in_flight(const std::vector<PipeOp>& stage_ops, int64_t chunks);

// Replays a schedule with fixed op times and free, instant sends: a forward
// waits for the previous virtual stage's forward of its micro-batch, a
// backward for the next virtual stage's backward (the last for its own
// forward). Throws naming the stuck stages when the order deadlocks.
struct ScheduleReplay {
  double makespan = 0;
  double bubble_fraction = 0;  // idle / (stages x makespan)
};
ScheduleReplay replay_schedule(const std::vector<std::vector<PipeOp>>& ops, int64_t chunks,
                               double forward_s, double backward_s);

}  // namespace meshtrain::plan
