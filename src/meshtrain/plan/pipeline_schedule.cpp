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

// ZB-H1 as a list schedule over unit op times: every time step, each idle
// stage runs the first of these that is ready: the input-gradient part B of
// its oldest micro-batch whose gradient has arrived, else the forward of its
// next micro-batch while fewer than `stages - s` await their B (1F1B's
// depth) and fewer than `stages` their W (1F1B's first-stage memory, on
// every stage), else the weight part W of its oldest micro-batch past B.
// The order each stage ran its ops in is the schedule.
std::vector<std::vector<PipeOp>> zero_bubble_h1(int64_t p, int64_t m) {
  std::vector<std::vector<PipeOp>> ops(static_cast<size_t>(p));
  // Completion step of F / B per (stage, micro-batch); -1 while pending.
  std::vector<int64_t> f_done(static_cast<size_t>(p * m), -1), b_done(f_done.size(), -1);
  auto at = [m](std::vector<int64_t>& v, int64_t s, int64_t i) -> int64_t& {
    return v[static_cast<size_t>(s * m + i)];
  };
  std::vector<int64_t> next_f(static_cast<size_t>(p), 0), next_b(next_f.size(), 0), next_w(next_f.size(), 0);
  int64_t remaining = 3 * p * m;
  for (int64_t t = 0; remaining > 0; ++t) {
    MT_CHECK(t <= 6 * p * m + 2 * p, "zero-bubble schedule: no progress (stages {}, micro-batches {})", p, m);
    for (int64_t s = 0; s < p; ++s) {
      const auto si = static_cast<size_t>(s);
      int64_t& f = next_f[si];
      int64_t& b = next_b[si];
      int64_t& w = next_w[si];
      // Ready at step t: produced by a step before t.
      auto ready = [t](int64_t done) { return done >= 0 && done < t; };
      const bool b_ready = b < f && (s + 1 == p ? ready(at(f_done, s, b)) : ready(at(b_done, s + 1, b)));
      // 1F1B's warm-up depth for the input parts; at most p micro-batches
      // (1F1B's first stage) held until their weight part on every stage.
      const bool f_ready = f < m && f - b < p - s && f - w < p &&
                           (s == 0 || ready(at(f_done, s - 1, f)));
      if (b_ready) {
        ops[si].push_back({false, b, 0, BackwardPart::Input});
        at(b_done, s, b++) = t;
      } else if (f_ready) {
        ops[si].push_back({true, f, 0});
        at(f_done, s, f++) = t;
      } else if (w < b) {
        ops[si].push_back({false, w++, 0, BackwardPart::Weight});
      } else {
        continue;
      }
      --remaining;
    }
  }
  return ops;
}

}  // namespace

const char* pipe_schedule_name(PipeSchedule s) {
  switch (s) {
    case PipeSchedule::GPipe: return "gpipe";
    case PipeSchedule::OneFOneB: return "1f1b";
    case PipeSchedule::Interleaved: return "interleaved 1f1b";
    case PipeSchedule::ZeroBubbleH1: return "zb-h1";
  }
  return "?";
}

PipeSchedule parse_pipe_schedule(const std::string& name) {
  if (name == "gpipe") return PipeSchedule::GPipe;
  if (name == "1f1b") return PipeSchedule::OneFOneB;
  if (name == "interleaved" || name == "interleaved 1f1b") return PipeSchedule::Interleaved;
  if (name == "zb-h1" || name == "zero-bubble") return PipeSchedule::ZeroBubbleH1;
  fail("unknown pipeline schedule \"{}\": gpipe, 1f1b, interleaved or zb-h1", name);
}

std::string pipe_op_label(const PipeOp& op) {
  const char* kind = op.forward ? "F" : op.part == BackwardPart::Whole ? "B"
                                    : op.part == BackwardPart::Input ? "b" : "w";
  return fmt::format("{}{}{}", kind, op.micro_batch, op.chunk > 0 ? fmt::format(".{}", op.chunk) : "");
}

std::string expected_bubble(PipeSchedule kind, int64_t stages, int64_t micro_batches, int64_t chunks) {
  const double formula = formula_bubble(kind, stages, micro_batches, chunks);
  if (kind != PipeSchedule::ZeroBubbleH1)
    return fmt::format("the {} formula: {:.1f}%", pipe_schedule_name(kind), 100 * formula);
  const ScheduleReplay r =
      replay_schedule(pipeline_schedule(kind, stages, micro_batches, chunks), chunks, 1.0, 2.0, 0.5);
  return fmt::format("the zb-h1 schedule replayed at equal F, B and W times: {:.1f}%; 1F1B's "
                     "formula: {:.1f}%", 100 * r.bubble_ratio, 100 * formula);
}

double formula_bubble(PipeSchedule kind, int64_t stages, int64_t micro_batches, int64_t chunks) {
  const double p = static_cast<double>(stages), m = static_cast<double>(micro_batches);
  switch (kind) {
    case PipeSchedule::GPipe:
    case PipeSchedule::OneFOneB: return (p - 1) / m;
    case PipeSchedule::Interleaved: return (p - 1) / (static_cast<double>(chunks) * m);
    case PipeSchedule::ZeroBubbleH1: return (p - 1) / m;  // at most 1F1B's (an upper bound)
  }
  return 0;
}

std::vector<std::vector<PipeOp>> pipeline_schedule(PipeSchedule kind, int64_t stages,
                                                   int64_t micro_batches, int64_t chunks) {
  MT_CHECK(stages >= 1 && micro_batches >= 1 && chunks >= 1,
           "pipeline schedule: stages, micro-batches and chunks must be >= 1 (got {}, {}, {})",
           stages, micro_batches, chunks);
  MT_CHECK((kind != PipeSchedule::OneFOneB && kind != PipeSchedule::ZeroBubbleH1) || chunks == 1,
           "{} runs one chunk per stage (got {}); use the interleaved schedule",
           pipe_schedule_name(kind), chunks);
  if (kind == PipeSchedule::ZeroBubbleH1) return zero_bubble_h1(stages, micro_batches);
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
    if (op.forward) ++live;
    else if (op.part != BackwardPart::Input) --live;  // the input part keeps what W needs
    peak = std::max(peak, live);
  }
  return static_cast<double>(peak) / static_cast<double>(chunks);
}

ScheduleReplay replay_schedule(const std::vector<std::vector<PipeOp>>& ops, int64_t chunks,
                               double forward_s, double backward_s, double input_share) {
  const int64_t p = static_cast<int64_t>(ops.size());
  int64_t m = 0;
  for (const auto& stage : ops)
    for (const PipeOp& op : stage) m = std::max(m, op.micro_batch + 1);
  const int64_t V = p * chunks;
  // End times per (what, virtual stage, micro-batch): forward, input
  // gradient (whole backward or its input part); -1 while pending.
  std::vector<double> done(static_cast<size_t>(2 * V * m), -1.0);
  auto at = [&](bool fwd, int64_t vs, int64_t mb) -> double& {
    return done[static_cast<size_t>(((fwd ? 0 : 1) * V + vs) * m + mb)];
  };
  auto duration = [&](const PipeOp& op) {
    if (op.forward) return forward_s;
    if (op.part == BackwardPart::Whole) return backward_s;
    return op.part == BackwardPart::Input ? backward_s * input_share : backward_s * (1 - input_share);
  };
  std::vector<size_t> head(static_cast<size_t>(p), 0);
  std::vector<double> free_at(static_cast<size_t>(p), 0.0);
  ScheduleReplay r;
  r.timeline.resize(static_cast<size_t>(p));
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
        if (op.sends_input_grad())
          ready = vs + 1 < V ? at(false, vs + 1, op.micro_batch) : at(true, vs, op.micro_batch);
        if (!op.forward && op.part == BackwardPart::Weight) ready = at(false, vs, op.micro_batch);
        if (ready < 0) break;
        MT_CHECK(op.forward || at(true, vs, op.micro_batch) >= 0,
                 "stage {} runs the backward of micro-batch {} chunk {} before its forward", s,
                 op.micro_batch, op.chunk);
        const double dur = duration(op);
        double& f = free_at[static_cast<size_t>(s)];
        const double start = std::max(f, ready);
        f = start + dur;
        if (op.forward || op.sends_input_grad()) at(op.forward, vs, op.micro_batch) = f;
        r.timeline[static_cast<size_t>(s)].push_back({op, start, f});
        busy += dur;
        progress = true;
      }
    }
  }
  std::vector<int64_t> stuck;
  for (int64_t s = 0; s < p; ++s)
    if (head[static_cast<size_t>(s)] < ops[static_cast<size_t>(s)].size()) stuck.push_back(s);
  MT_CHECK(stuck.empty(), "pipeline schedule deadlocks: stages {} wait on each other", fmt::join(stuck, ", "));
  r.makespan = *std::max_element(free_at.begin(), free_at.end());
  const double total = static_cast<double>(p) * r.makespan;
  r.bubble_fraction = r.makespan > 0 ? 1.0 - busy / total : 0.0;
  r.bubble_ratio = busy > 0 ? (total - busy) / busy : 0.0;
  return r;
}

}  // namespace meshtrain::plan
