#include "meshtrain/plan/pipeline_schedule.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "meshtrain/core/error.h"

namespace meshtrain::plan {

namespace {

std::vector<PipeOp> gpipe(int64_t m, int64_t v) {
  std::vector<PipeOp> ops;
  for (int64_t c = 0; c < v; ++c)
    for (int64_t i = 0; i < m; ++i) ops.push_back({true, i, c});
  for (int64_t c = v - 1; c >= 0; --c)
    for (int64_t i = 0; i < m; ++i) ops.push_back({false, i, c});
  return ops;
}

std::vector<PipeOp> one_f_one_b(int64_t p, int64_t s, int64_t m) {
  const int64_t warmup = std::min(p - s - 1, m);
  std::vector<PipeOp> ops;
  for (int64_t i = 0; i < warmup; ++i) ops.push_back({true, i, 0});
  for (int64_t i = 0; i < m - warmup; ++i) {
    ops.push_back({true, warmup + i, 0});
    ops.push_back({false, i, 0});
  }
  for (int64_t i = m - warmup; i < m; ++i) ops.push_back({false, i, 0});
  return ops;
}

// Megatron-LM's order: the k-th forward (backward) of a stage is micro-batch
// (k / (p v)) p + k % p of chunk (k % (p v)) / p (reversed for backward), so
// each round of p micro-batches passes every chunk before the next round.
PipeOp interleaved_op(int64_t k, bool forward, int64_t p, int64_t v) {
  const int64_t in_group = k % (p * v);
  const int64_t c = in_group / p;
  return {forward, (k / (p * v)) * p + in_group % p, forward ? c : v - 1 - c};
}

std::vector<PipeOp> interleaved(int64_t p, int64_t s, int64_t m, int64_t v) {
  const int64_t total = m * v;
  // Deeper warm-up than 1F1B: stage s must have run its share of every
  // chunk before the first backward comes back around the pipeline.
  const int64_t warmup = std::min(total, (p - s - 1) * 2 + (v - 1) * p);
  std::vector<PipeOp> ops;
  for (int64_t k = 0; k < warmup; ++k) ops.push_back(interleaved_op(k, true, p, v));
  for (int64_t k = 0; k < total - warmup; ++k) {
    ops.push_back(interleaved_op(warmup + k, true, p, v));
    ops.push_back(interleaved_op(k, false, p, v));
  }
  for (int64_t k = total - warmup; k < total; ++k) ops.push_back(interleaved_op(k, false, p, v));
  return ops;
}

}  // namespace

const char* pipe_schedule_name(PipeSchedule s) {
  switch (s) {
    case PipeSchedule::GPipe: return "gpipe";
    case PipeSchedule::OneFOneB: return "1f1b";
    case PipeSchedule::Interleaved: return "interleaved 1f1b";
  }
  return "?";
}

std::vector<std::vector<PipeOp>> pipeline_schedule(PipeSchedule kind, int64_t stages,
                                                   int64_t micro_batches, int64_t chunks) {
  MT_CHECK(stages >= 1 && micro_batches >= 1 && chunks >= 1,
           "pipeline schedule: stages, micro-batches and chunks must be >= 1 (got {}, {}, {})",
           stages, micro_batches, chunks);
  MT_CHECK(kind != PipeSchedule::OneFOneB || chunks == 1,
           "1F1B runs one chunk per stage (got {}); use the interleaved schedule", chunks);
  MT_CHECK(kind != PipeSchedule::Interleaved || micro_batches % stages == 0,
           "interleaved 1F1B needs the micro-batches ({}) in whole rounds of the stages ({})",
           micro_batches, stages);
  std::vector<std::vector<PipeOp>> out(static_cast<size_t>(stages));
  for (int64_t s = 0; s < stages; ++s) {
    auto& ops = out[static_cast<size_t>(s)];
    if (kind == PipeSchedule::GPipe) ops = gpipe(micro_batches, chunks);
    else if (kind == PipeSchedule::OneFOneB) ops = one_f_one_b(stages, s, micro_batches);
    else ops = interleaved(stages, s, micro_batches, chunks);
  }
  return out;
}

double peak_in_flight(const std::vector<PipeOp>& stage_ops, int64_t chunks) {
  int64_t live = 0, peak = 0;
  for (const PipeOp& op : stage_ops) {
    live += op.forward ? 1 : -1;
    peak = std::max(peak, live);
  }
  return static_cast<double>(peak) / static_cast<double>(chunks);
}

ScheduleReplay replay_schedule(const std::vector<std::vector<PipeOp>>& ops, int64_t chunks,
                               double forward_s, double backward_s) {
  const int64_t p = static_cast<int64_t>(ops.size());
  int64_t m = 0;
  for (const auto& stage : ops)
    for (const PipeOp& op : stage) m = std::max(m, op.micro_batch + 1);
  const int64_t V = p * chunks;
  // done[forward][virtual stage][micro-batch]: end time, -1 while pending.
  std::vector<double> done(static_cast<size_t>(2 * V * m), -1.0);
  auto at = [&](bool fwd, int64_t vs, int64_t mb) -> double& {
    return done[static_cast<size_t>(((fwd ? 0 : 1) * V + vs) * m + mb)];
  };
  std::vector<size_t> head(static_cast<size_t>(p), 0);
  std::vector<double> free_at(static_cast<size_t>(p), 0.0);
  double busy = 0;
  for (bool progress = true; progress;) {
    progress = false;
    for (int64_t s = 0; s < p; ++s) {
      const auto& stage = ops[static_cast<size_t>(s)];
      for (size_t& h = head[static_cast<size_t>(s)]; h < stage.size(); ++h) {
        const PipeOp& op = stage[h];
        const int64_t vs = virtual_stage(s, op.chunk, p);
        double ready = 0;
        if (op.forward && vs > 0) ready = at(true, vs - 1, op.micro_batch);
        if (!op.forward) ready = vs + 1 < V ? at(false, vs + 1, op.micro_batch) : at(true, vs, op.micro_batch);
        if (ready < 0) break;
        MT_CHECK(op.forward || at(true, vs, op.micro_batch) >= 0,
                 "stage {} runs the backward of micro-batch {} chunk {} before its forward", s,
                 op.micro_batch, op.chunk);
        const double dur = op.forward ? forward_s : backward_s;
        double& f = free_at[static_cast<size_t>(s)];
        f = std::max(f, ready) + dur;
        at(op.forward, vs, op.micro_batch) = f;
        busy += dur;
        progress = true;
      }
    }
  }
  std::vector<int64_t> stuck;
  for (int64_t s = 0; s < p; ++s)
    if (head[static_cast<size_t>(s)] < ops[static_cast<size_t>(s)].size()) stuck.push_back(s);
  MT_CHECK(stuck.empty(), "pipeline schedule deadlocks: stages {} wait on each other", fmt::join(stuck, ", "));
  ScheduleReplay r;
  r.makespan = *std::max_element(free_at.begin(), free_at.end());
  r.bubble_fraction = r.makespan > 0 ? 1.0 - busy / (static_cast<double>(p) * r.makespan) : 0.0;
  return r;
}

}  // namespace meshtrain::plan
