#include "meshtrain/plan/pipeline_instructions.h"

#include <fmt/format.h>

#include <deque>
#include <map>
#include <tuple>

#include "meshtrain/core/error.h"

namespace meshtrain::plan {

namespace {

// Stage and chunk of virtual stage vs.
std::pair<int64_t, int64_t> place(int64_t vs, int64_t p) { return {vs % p, vs / p}; }

// A message on a lane: the forward's or backward's micro-batch and the
// virtual stage it is for.
struct Message {
  bool activation = true;
  int64_t micro_batch = 0, to_virtual = 0;
  bool operator==(const Message&) const = default;
};

std::string describe(const Message& m, int64_t p) {
  const auto [stage, chunk] = place(m.to_virtual, p);
  return fmt::format("the {} of micro-batch {} for stage {} chunk {}",
                     m.activation ? "activation" : "gradient", m.micro_batch, stage, chunk);
}

}  // namespace

std::string pipe_instr_label(const PipeInstr& in) {
  const std::string op = pipe_op_label(in.op);
  switch (in.kind) {
    case PipeInstrKind::RecvActivation:
    case PipeInstrKind::RecvGradient: return fmt::format("recv {} <- {}", op, in.peer);
    case PipeInstrKind::SendActivation:
    case PipeInstrKind::SendGradient: return fmt::format("send {} -> {}", op, in.peer);
    case PipeInstrKind::Forward:
    case PipeInstrKind::Backward: return op;
    case PipeInstrKind::OptimizerStep: return "step";
  }
  return "?";
}

std::vector<std::vector<PipeInstr>> pipeline_instructions(
    const std::vector<std::vector<PipeOp>>& ops, int64_t chunks) {
  const int64_t p = static_cast<int64_t>(ops.size()), V = p * chunks;
  std::vector<std::vector<PipeInstr>> out(ops.size());
  for (int64_t s = 0; s < p; ++s) {
    auto& list = out[static_cast<size_t>(s)];
    for (const PipeOp& op : ops[static_cast<size_t>(s)]) {
      const int64_t vs = virtual_stage(s, op.chunk, p);
      const int64_t prev = place((vs + V - 1) % V, p).first, next = place((vs + 1) % V, p).first;
      if (op.forward) {
        if (vs > 0) list.push_back({PipeInstrKind::RecvActivation, op, prev});
        list.push_back({PipeInstrKind::Forward, op, -1});
        if (vs + 1 < V) list.push_back({PipeInstrKind::SendActivation, op, next});
      } else if (op.sends_input_grad()) {
        if (vs + 1 < V) list.push_back({PipeInstrKind::RecvGradient, op, next});
        list.push_back({PipeInstrKind::Backward, op, -1});
        if (vs > 0) list.push_back({PipeInstrKind::SendGradient, op, prev});
      } else {
        list.push_back({PipeInstrKind::Backward, op, -1});  // the weight part: no transfer
      }
    }
    list.push_back({PipeInstrKind::OptimizerStep, {}, -1});
  }
  return out;
}

void check_instructions(const std::vector<std::vector<PipeInstr>>& instrs) {
  const int64_t p = static_cast<int64_t>(instrs.size());
  // (from, to, activation?) -> messages in flight, oldest first.
  std::map<std::tuple<int64_t, int64_t, bool>, std::deque<Message>> lanes;
  std::vector<size_t> head(instrs.size(), 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int64_t s = 0; s < p; ++s) {
      const auto& list = instrs[static_cast<size_t>(s)];
      for (size_t& h = head[static_cast<size_t>(s)]; h < list.size(); ++h) {
        const PipeInstr& in = list[h];
        const int64_t vs = virtual_stage(s, in.op.chunk, p);
        const bool act = in.kind == PipeInstrKind::SendActivation || in.kind == PipeInstrKind::RecvActivation;
        if (in.kind == PipeInstrKind::SendActivation || in.kind == PipeInstrKind::SendGradient) {
          lanes[{s, in.peer, act}].push_back({act, in.op.micro_batch, act ? vs + 1 : vs - 1});
        } else if (in.kind == PipeInstrKind::RecvActivation || in.kind == PipeInstrKind::RecvGradient) {
          auto& lane = lanes[{in.peer, s, act}];
          if (lane.empty()) break;  // blocks until the peer sends
          const Message want{act, in.op.micro_batch, vs};
          MT_CHECK(lane.front() == want, "pipeline instructions: stage {} receives {} from stage {}, "
                   "but that lane delivers {} first", s, describe(want, p), in.peer,
                   describe(lane.front(), p));
          lane.pop_front();
        }
        progress = true;
      }
    }
  }
  std::string stuck;
  for (int64_t s = 0; s < p; ++s) {
    const auto& list = instrs[static_cast<size_t>(s)];
    const size_t h = head[static_cast<size_t>(s)];
    if (h < list.size())
      stuck += fmt::format("{}stage {} at \"{}\"", stuck.empty() ? "" : "; ", s, pipe_instr_label(list[h]));
  }
  MT_CHECK(stuck.empty(), "pipeline instructions deadlock: {}", stuck);
  for (const auto& [key, lane] : lanes)
    MT_CHECK(lane.empty(), "pipeline instructions: stage {} sends {} to stage {}, which never "
             "receives it", std::get<0>(key), describe(lane.front(), p), std::get<1>(key));
}

}  // namespace meshtrain::plan
