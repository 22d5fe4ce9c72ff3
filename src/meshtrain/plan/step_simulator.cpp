#include "meshtrain/plan/step_simulator.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <set>

#include "meshtrain/core/error.h"
#include "meshtrain/plan/step_graph.h"

namespace meshtrain::plan {

namespace {

using sim::CellMap;
using sim::StepGraph;
using sim::Task;
using sim::TaskKind;

// More buckets than this per stage are merged (the last keeps its own size,
// which is what stays exposed); 1T on 1,024 GPUs would otherwise be ~300.
constexpr int64_t kMaxBuckets = 128;

struct OpTimes {  // seconds, one op of one micro-batch and chunk unless said
  double forward = 0, backward = 0, tp_forward = 0, tp_backward = 0, send = 0;
  double reduce = 0, gather = 0;  // the step's whole reduction and gathers
  int64_t buckets = 1;            // 25 MiB buckets in the reduction
};

OpTimes op_times(const PlanRequest& r, const Layout& l, const PlanRow& row) {
  const TimeBreakdown& t = row.time;
  const double n = static_cast<double>(l.micro_batches * l.chunks);
  OpTimes o;
  o.forward = t.compute / 3.0 / n;
  o.backward = (2.0 * t.compute / 3.0 + t.recompute) / n;
  const double collectives = l.recompute == RecomputePolicy::Full ? 6 : 4;
  o.tp_forward = t.tp_comm / n * 2.0 / collectives;
  o.tp_backward = t.tp_comm / n * (collectives - 2.0) / collectives;
  if (l.pp > 1)
    o.send = t.pp_comm / (2.0 * static_cast<double>(l.chunks * (l.micro_batches + l.pp - 2)));
  // The planner's dp traffic as the engine runs it (planner.cpp): stages
  // 0-1 reduce once (the last micro-batch's backward), 2-3 every
  // micro-batch; stage 3 gathers before every forward and backward, 1-2 once.
  o.reduce = t.dp_reduce;
  o.gather = t.dp_gather;
  const double psi = row.memory.params / kMeshtrainBf16.p * (l.zero_stage == 3 ? static_cast<double>(l.dp) : 1.0);
  const double wire = r.engine.gradient_wire_bytes * psi;
  o.buckets = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(wire / kGradientBucketBytes)));
  return o;
}

// One collective in a stage's comm-stream order, the same on every replica.
struct CommItem {
  TaskKind kind;
  double dur;
  int64_t release_op;   // the op (index in the stage's order) that issues it; -1: t = 0
  double release_frac;  // how far through that op
  int64_t gates_op;     // the op that waits for it (a gather); -1: none
};

std::vector<CommItem> comm_program(const std::vector<PipeOp>& ops, const OpTimes& ot, int zero, bool overlap) {
  std::vector<CommItem> items;
  const auto last = static_cast<int64_t>(ops.size()) - 1;
  if (!overlap) {  // after the last backward; the gathers follow the update (simulate_step)
    if (ot.reduce > 0) items.push_back({TaskKind::Reduce, ot.reduce, last, 1.0, -1});
    return items;
  }
  // The reduction's backward ops: every one from stage 2 (each micro-batch's
  // gradients reduced), else the last micro-batch's (accumulated first).
  int64_t last_micro = 0;
  for (const PipeOp& op : ops) last_micro = std::max<int64_t>(last_micro, op.micro_batch);
  std::vector<int64_t> backward_ops;
  double nb = 0, nf = 0, first_forwards = 0;
  for (int64_t k = 0; k <= last; ++k) {
    const PipeOp& op = ops[static_cast<size_t>(k)];
    (op.forward ? nf : nb) += 1;
    if (op.forward && op.micro_batch == 0) first_forwards += 1;
    if (!op.forward && (zero >= 2 || op.micro_batch == last_micro)) backward_ops.push_back(k);
  }
  auto gather_for = [&](int64_t k) {
    const PipeOp& op = ops[static_cast<size_t>(k)];
    if (zero == 3) return ot.gather / 2.0 / (op.forward ? nf : nb);
    if (zero >= 1 && op.forward && op.micro_batch == 0) return ot.gather / first_forwards;
    return 0.0;
  };
  const double nr = static_cast<double>(backward_ops.size());
  // Buckets, as cumulative counts of the real ones (merged past kMaxBuckets).
  const int64_t real = ot.buckets, n = std::min(real, kMaxBuckets);
  std::vector<CommItem> buckets;
  double prev = 0;
  for (int64_t j = 0; ot.reduce > 0 && j < n; ++j) {
    const double cum = n == real || j == n - 1
                           ? static_cast<double>(j + 1 == n ? real : j + 1)
                           : std::round(static_cast<double>(j + 1) * static_cast<double>(real - 1) / static_cast<double>(n - 1));
    const double pos = cum / static_cast<double>(real) * nr;  // in the reduction's backward ops
    const int64_t q = std::clamp<int64_t>(static_cast<int64_t>(std::ceil(pos)) - 1, 0, static_cast<int64_t>(nr) - 1);
    buckets.push_back({TaskKind::Reduce, ot.reduce * (cum - prev) / static_cast<double>(real),
                       backward_ops[static_cast<size_t>(q)], pos - static_cast<double>(q), -1});
    prev = cum;
  }
  // Issue order: the first op's gather at t = 0; then per op, the next op's
  // gather (at this op's start), then the buckets this op releases.
  if (last >= 0 && gather_for(0) > 0) items.push_back({TaskKind::Gather, gather_for(0), -1, 0.0, 0});
  size_t j = 0;
  for (int64_t k = 0; k <= last; ++k) {
    if (k < last && gather_for(k + 1) > 0) items.push_back({TaskKind::Gather, gather_for(k + 1), k, 0.0, k + 1});
    for (; j < buckets.size() && buckets[j].release_op == k; ++j) items.push_back(buckets[j]);
  }
  return items;
}

// Seconds of [a, b] covered by sorted, disjoint intervals.
double covered(double a, double b, const std::vector<std::pair<double, double>>& iv) {
  double sum = 0;
  auto it = std::lower_bound(iv.begin(), iv.end(), a, [](const auto& x, double v) { return x.second <= v; });
  for (; it != iv.end() && it->first < b; ++it) sum += std::max(0.0, std::min(b, it->second) - std::max(a, it->first));
  return sum;
}

const char* segment_label(TaskKind k) {
  switch (k) {
    case TaskKind::Forward:
    case TaskKind::Backward: return "forward/backward";
    case TaskKind::SendForward:
    case TaskKind::SendBackward: return "pipeline send";
    default: return sim::task_kind_name(k);
  }
}

std::vector<int64_t> default_trace_ranks(const CellMap& map, const SimOptions& o) {
  const int64_t world = map.cells() * map.tp;
  std::set<int64_t> out;
  if (world <= 64) {
    for (int64_t r = 0; r < world; ++r) out.insert(r);
  } else {
    out.insert(map.first_rank(map.cell(0, 0)));
    out.insert(map.first_rank(map.cell(map.pp - 1, 0)));
    for (const auto& [r, f] : o.stragglers) {
      out.insert(r);
      const int64_t cell = map.cell_of_rank(r), d = map.replica_of(cell);
      if (map.dp > 1)  // a peer that waits for it at the data-parallel collective
        out.insert(map.first_rank(map.cell(map.stage_of(cell), d == 0 ? 1 : 0)) + r % map.tp);
    }
  }
  return {out.begin(), out.end()};
}

}  // namespace

SimResult simulate_step(const PlanRequest& req, const Layout& l, const SimOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  SimResult res;
  res.analytic = evaluate_layout(req, l);
  const TimeBreakdown& T = res.analytic.time;
  const CellMap map{l.dp, l.tp, l.pp, l.chunks, req.cluster.gpus_per_node};
  const int64_t world = map.cells() * map.tp, m = l.micro_batches, V = l.pp * l.chunks;
  std::vector<double> factor(static_cast<size_t>(world), 1.0);
  for (const auto& [r, f] : o.stragglers) {
    MT_CHECK(r >= 0 && r < world, "straggler rank {} is outside the {} ranks of {}", r, world, l.describe());
    MT_CHECK(f > 0 && std::isfinite(f), "straggler factor for rank {} must be > 0 (got {})", r, f);
    factor[static_cast<size_t>(r)] = f;
  }
  MT_CHECK(o.jitter_sigma >= 0, "jitter sigma must be >= 0 (got {})", o.jitter_sigma);
  res.schedule = o.schedule.value_or(l.chunks > 1 ? PipeSchedule::Interleaved : PipeSchedule::OneFOneB);
  const auto sched = pipeline_schedule(res.schedule, l.pp, m, l.chunks);
  res.stage0_in_flight = peak_in_flight(sched[0], l.chunks);
  const OpTimes ot = op_times(req, l, res.analytic);

  StepGraph g(static_cast<int>(map.cells() * sim::kStreamsPerCell));
  std::vector<double> compute(static_cast<size_t>(world)), tp_comm(compute.size()), tp_wait(compute.size()),
      optimizer(compute.size()), own(static_cast<size_t>(l.tp));
  std::mt19937_64 rng(o.seed);
  std::normal_distribution<double> normal;
  const double sigma = o.jitter_sigma;
  std::vector<std::vector<int32_t>> op_task(static_cast<size_t>(map.cells()));
  std::vector<int32_t> send_f(static_cast<size_t>(l.dp * V * m), -1), send_b(send_f.size(), -1);
  auto slot = [&](int64_t d, int64_t vs, int64_t mb) { return static_cast<size_t>((d * V + vs) * m + mb); };

  // Compute ops in schedule order, each followed by its pipeline send.
  for (int64_t s = 0; s < l.pp; ++s)
    for (int64_t d = 0; d < l.dp; ++d) {
      const int64_t cell = map.cell(s, d);
      for (const PipeOp& op : sched[static_cast<size_t>(s)]) {
        const double base = op.forward ? ot.forward : ot.backward, tpc = op.forward ? ot.tp_forward : ot.tp_backward;
        double slowest = 0;
        for (int64_t t = 0; t < l.tp; ++t) {
          const auto r = static_cast<size_t>(map.first_rank(cell) + t);
          const double jitter = sigma > 0 ? std::exp(sigma * normal(rng) - sigma * sigma / 2) : 1.0;
          own[static_cast<size_t>(t)] = base * factor[r] * jitter;
          compute[r] += own[static_cast<size_t>(t)];
          tp_comm[r] += tpc;
          slowest = std::max(slowest, own[static_cast<size_t>(t)]);
        }
        for (int64_t t = 0; t < l.tp; ++t)
          tp_wait[static_cast<size_t>(map.first_rank(cell) + t)] += slowest - own[static_cast<size_t>(t)];
        const auto kind = op.forward ? TaskKind::Forward : TaskKind::Backward;
        const Task task{kind, static_cast<int32_t>(cell), static_cast<int32_t>(op.micro_batch),
                        static_cast<int32_t>(op.chunk), slowest + tpc};
        const int32_t id = g.add(task, {map.stream(cell, sim::kCompute)});
        op_task[static_cast<size_t>(cell)].push_back(id);
        const int64_t vs = virtual_stage(s, op.chunk, l.pp);
        if (l.pp == 1) continue;
        if (op.forward && vs + 1 < V) {
          Task send = task;
          send.kind = TaskKind::SendForward, send.dur = ot.send;
          send_f[slot(d, vs, op.micro_batch)] = g.add(send, {map.stream(cell, sim::kLinkForward)});
          g.depend(send_f[slot(d, vs, op.micro_batch)], id);
        } else if (!op.forward && vs > 0) {
          Task send = task;
          send.kind = TaskKind::SendBackward, send.dur = ot.send;
          send_b[slot(d, vs, op.micro_batch)] = g.add(send, {map.stream(cell, sim::kLinkBackward)});
          g.depend(send_b[slot(d, vs, op.micro_batch)], id);
        }
      }
    }
  // Receives: a forward waits for the previous virtual stage's activations,
  // a backward for the next one's gradient.
  for (int64_t s = 0; s < l.pp && l.pp > 1; ++s)
    for (int64_t d = 0; d < l.dp; ++d) {
      const auto& ops = sched[static_cast<size_t>(s)];
      for (size_t k = 0; k < ops.size(); ++k) {
        const int64_t vs = virtual_stage(s, ops[k].chunk, l.pp);
        const int32_t id = op_task[static_cast<size_t>(map.cell(s, d))][k];
        if (ops[k].forward && vs > 0) g.depend(id, send_f[slot(d, vs - 1, ops[k].micro_batch)]);
        if (!ops[k].forward && vs + 1 < V) g.depend(id, send_b[slot(d, vs + 1, ops[k].micro_batch)]);
      }
    }
  // Data-parallel collectives: one task over the comm streams of every
  // replica's cell of the stage, released by each replica's own op.
  const bool overlap = req.engine.overlap_dp_with_backward;
  std::vector<int32_t> last_comm(static_cast<size_t>(l.pp), -1);
  auto stage_comm_streams = [&](int64_t s) {
    std::vector<int> out;
    for (int64_t d = 0; d < l.dp; ++d) out.push_back(map.stream(map.cell(s, d), sim::kComm));
    return out;
  };
  for (int64_t s = 0; s < l.pp && l.dp > 1 && T.dp_total > 0; ++s)
    for (const CommItem& item : comm_program(sched[static_cast<size_t>(s)], ot, l.zero_stage, overlap)) {
      const int32_t id = g.add(Task{item.kind, static_cast<int32_t>(map.cell(s, 0)), -1, -1, item.dur}, stage_comm_streams(s));
      for (int64_t d = 0; d < l.dp; ++d) {
        const auto& ops = op_task[static_cast<size_t>(map.cell(s, d))];
        if (item.release_op >= 0) g.depend(id, ops[static_cast<size_t>(item.release_op)], item.release_frac);
        if (item.gates_op >= 0) g.depend(ops[static_cast<size_t>(item.gates_op)], id);
      }
      last_comm[static_cast<size_t>(s)] = id;
    }
  // The update, after the stage's last bucket.
  std::vector<int32_t> opt_task(static_cast<size_t>(map.cells()));
  std::vector<double> opt_cell(opt_task.size());
  for (int64_t cell = 0; cell < map.cells(); ++cell) {
    double slowest = 0;
    for (int64_t t = 0; t < l.tp; ++t) {
      const auto r = static_cast<size_t>(map.first_rank(cell) + t);
      optimizer[r] = T.optimizer * factor[r];
      slowest = std::max(slowest, optimizer[r]);
    }
    opt_cell[static_cast<size_t>(cell)] = slowest;
    const int32_t id = g.add(Task{TaskKind::Optimizer, static_cast<int32_t>(cell), -1, -1, slowest},
                             {map.stream(cell, sim::kCompute)});
    if (last_comm[static_cast<size_t>(map.stage_of(cell))] >= 0) g.depend(id, last_comm[static_cast<size_t>(map.stage_of(cell))]);
    opt_task[static_cast<size_t>(cell)] = id;
  }
  // Without overlap, ZeRO's gathers of the updated parameters follow the update.
  if (!overlap && l.dp > 1 && ot.gather > 0)
    for (int64_t s = 0; s < l.pp; ++s) {
      const double dur = ot.gather;
      const int32_t id = g.add(Task{TaskKind::Gather, static_cast<int32_t>(map.cell(s, 0)), -1, -1, dur}, stage_comm_streams(s));
      for (int64_t d = 0; d < l.dp; ++d) g.depend(id, opt_task[static_cast<size_t>(map.cell(s, d))]);
    }

  g.run();
  res.step = g.end();
  res.tasks = static_cast<int64_t>(g.tasks.size());

  // Per rank: the cell's compute-stream gaps, split at its last op and by
  // whether its comm stream was busy meanwhile.
  res.ranks.reserve(static_cast<size_t>(world));
  for (int64_t cell = 0; cell < map.cells(); ++cell) {
    std::vector<std::pair<double, double>> comm;
    for (int32_t id : g.stream(map.stream(cell, sim::kComm))) comm.emplace_back(g.tasks[static_cast<size_t>(id)].start, g.tasks[static_cast<size_t>(id)].end);
    const double last_op = g.tasks[static_cast<size_t>(op_task[static_cast<size_t>(cell)].back())].end;
    double bubble = 0, exposed = 0, tail = 0, at = 0;
    auto gap = [&](double a, double b) {
      if (b <= a) return;
      const double split = std::clamp(last_op, a, b);
      const double c_pre = covered(a, split, comm), c_post = covered(split, b, comm);
      bubble += split - a - c_pre;
      tail += b - split - c_post;
      exposed += c_pre + c_post;
    };
    for (int32_t id : g.stream(map.stream(cell, sim::kCompute))) {
      gap(at, g.tasks[static_cast<size_t>(id)].start);
      at = g.tasks[static_cast<size_t>(id)].end;
    }
    gap(at, res.step);
    for (int64_t t = 0; t < l.tp; ++t) {
      const int64_t r = map.first_rank(cell) + t;
      const auto i = static_cast<size_t>(r);
      RankTime rt{r, map.replica_of(cell), t, map.stage_of(cell), compute[i], tp_comm[i], tp_wait[i], optimizer[i],
                  bubble, exposed, tail + opt_cell[static_cast<size_t>(cell)] - optimizer[i]};
      res.ranks.push_back(rt);
    }
  }
  const double n = static_cast<double>(world);
  for (const RankTime& r : res.ranks) {
    res.mean.compute += r.compute / n, res.mean.tp_comm += r.tp_comm / n, res.mean.tp_wait += r.tp_wait / n;
    res.mean.optimizer += r.optimizer / n, res.mean.bubble += r.bubble / n;
    res.mean.exposed_comm += r.exposed_comm / n, res.mean.tail_wait += r.tail_wait / n;
  }

  // Critical path: each task's share is the time until the next one on the path starts.
  const std::vector<int32_t> path = g.critical_path();
  for (size_t i = 0; i < path.size(); ++i) {
    const Task& t = g.tasks[static_cast<size_t>(path[i])];
    const double until = i + 1 < path.size() ? g.tasks[static_cast<size_t>(path[i + 1])].start : t.end;
    const bool collective = t.kind == TaskKind::Reduce || t.kind == TaskKind::Gather;
    CriticalSegment seg{segment_label(t.kind), map.stage_of(t.cell), collective ? -1 : map.replica_of(t.cell), until - t.start};
    auto& segs = res.critical_path;
    if (!segs.empty() && segs.back().what == seg.what && segs.back().stage == seg.stage && segs.back().replica == seg.replica)
      segs.back().seconds += seg.seconds;
    else
      segs.push_back(seg);
  }
  for (const char* kind : {"forward/backward", "pipeline send", "dp reduce", "zero gather", "optimizer"}) {
    double sum = 0;
    for (const auto& s : res.critical_path)
      if (s.what == kind) sum += s.seconds;
    if (sum > 0) res.critical_by_kind.emplace_back(kind, sum);
  }

  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();  // without the trace
  if (!o.trace_path.empty()) {
    res.traced_ranks = o.trace_ranks.empty() ? default_trace_ranks(map, o) : o.trace_ranks;
    std::sort(res.traced_ranks.begin(), res.traced_ranks.end());
    res.traced_ranks.erase(std::unique(res.traced_ranks.begin(), res.traced_ranks.end()), res.traced_ranks.end());
    for (int64_t r : res.traced_ranks)
      MT_CHECK(r >= 0 && r < world, "trace rank {} is outside the {} ranks", r, world);
    sim::write_step_trace(o.trace_path, g, map, res.traced_ranks,
                          fmt::format("{} on {} x {}: {} ({})", req.model.name, req.gpus, req.cluster.name,
                                      l.describe(), pipe_schedule_name(res.schedule)));
  }
  return res;
}

}  // namespace meshtrain::plan
