// A pipeline schedule (plan/pipeline_schedule.h) as the per-rank instruction
// lists the engine's executor runs: each stage's compute ops with the
// point-to-point transfers they need made explicit (a receive right before
// the op that reads it, a send right after the op that produces it) and the
// optimizer step at the end. The planner's simulator and the executor read
// the same lists, so what is planned is what runs.
//
// Transfers travel on lanes, one per (sending stage, receiving stage,
// direction), each first in, first out, as the Communicator's send/recv
// lanes are; sends never block, receives do. check_instructions() runs a
// set of lists under exactly those rules and throws on a deadlock, on a
// receive whose lane delivers another message first, and on a message
// nobody receives.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "meshtrain/plan/pipeline_schedule.h"

namespace meshtrain::plan {

enum class PipeInstrKind {
  RecvActivation,  // the previous virtual stage's forward output
  Forward,
  SendActivation,  // to the next virtual stage
  RecvGradient,    // the next virtual stage's input gradient
  Backward,        // whole, or one part (op.part)
  SendGradient,    // this op's input gradient to the previous virtual stage
  OptimizerStep,   // after every op of the step (the gradient sync first)
};

struct PipeInstr {
  PipeInstrKind kind = PipeInstrKind::Forward;
  PipeOp op;      // the compute op, or the op whose input or output moves
  int64_t peer = -1;  // the stage a transfer goes to or comes from
  bool operator==(const PipeInstr&) const = default;
};

// "recv F3 <- 1", "F3", "send F3 -> 1", "step".
std::string pipe_instr_label(const PipeInstr& in);

// ops: a schedule's per-stage ops; chunks: model chunks per stage.
std::vector<std::vector<PipeInstr>> pipeline_instructions(
    const std::vector<std::vector<PipeOp>>& ops, int64_t chunks);

// Runs the lists with non-blocking sends and blocking receives on FIFO
// lanes; throws meshtrain::Error naming the stuck ranks and what each waits
// for, or the mismatched or unreceived message.
void check_instructions(const std::vector<std::vector<PipeInstr>>& instrs);

}  // namespace meshtrain::plan
