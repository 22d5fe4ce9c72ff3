// The simulated step as a Chrome/Perfetto trace. Written here rather than
// with telemetry::Tracer: that one records wall-clock events per process,
// this lays out simulated times for many ranks grouped by node.
#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "meshtrain/core/error.h"
#include "meshtrain/plan/step_graph.h"

namespace meshtrain::plan::sim {

namespace {

int thread_of(TaskKind k) {
  switch (k) {
    case TaskKind::Reduce:
    case TaskKind::Gather: return 1;
    case TaskKind::SendForward: return 2;
    case TaskKind::SendBackward: return 3;
    default: return 0;
  }
}

std::string event_name(const Task& t, const CellMap& map) {
  if (t.micro_batch < 0) return task_kind_name(t.kind);
  if (map.chunks > 1) return fmt::format("{} mb {} chunk {}", task_kind_name(t.kind), t.micro_batch, t.chunk);
  return fmt::format("{} mb {}", task_kind_name(t.kind), t.micro_batch);
}

}  // namespace

void write_step_trace(const std::string& path, const StepGraph& g, const CellMap& map,
                      const std::vector<int64_t>& ranks, const std::string& title) {
  std::vector<std::vector<int64_t>> by_cell(static_cast<size_t>(map.cells()));
  for (int64_t r : ranks) by_cell[static_cast<size_t>(map.cell_of_rank(r))].push_back(r);
  nlohmann::json events = nlohmann::json::array();
  std::set<int64_t> nodes;
  // One track per in-order stream, so a track's slices never overlap.
  static const char* kThreads[] = {"compute", "dp comm", "sends forward", "sends backward"};
  for (int64_t r : ranks) {
    const int64_t node = r / map.gpus_per_node;
    if (nodes.insert(node).second) {
      events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", node}, {"args", {{"name", fmt::format("node {}", node)}}}});
      events.push_back({{"ph", "M"}, {"name", "process_sort_index"}, {"pid", node}, {"args", {{"sort_index", node}}}});
    }
    const int64_t cell = map.cell_of_rank(r);
    for (int k = 0; k < 4; ++k) {
      const int64_t tid = r * 4 + k;
      events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", node}, {"tid", tid},
                        {"args", {{"name", fmt::format("rank {} (stage {}, dp {}, tp {}) {}", r, map.stage_of(cell),
                                                       map.replica_of(cell), r % map.tp, kThreads[k])}}}});
      events.push_back({{"ph", "M"}, {"name", "thread_sort_index"}, {"pid", node}, {"tid", tid}, {"args", {{"sort_index", tid}}}});
    }
  }
  auto emit = [&](const Task& t, int64_t cell) {
    for (int64_t r : by_cell[static_cast<size_t>(cell)]) {
      nlohmann::json args = {{"stage", map.stage_of(cell)}, {"dp", map.replica_of(cell)}};
      if (t.micro_batch >= 0) args["micro_batch"] = t.micro_batch;
      if (t.chunk >= 0 && map.chunks > 1) args["chunk"] = t.chunk;
      if (t.critical) args["critical_path"] = true;
      events.push_back({{"ph", "X"}, {"name", event_name(t, map)}, {"cat", task_kind_name(t.kind)},
                        {"pid", r / map.gpus_per_node}, {"tid", r * 4 + thread_of(t.kind)},
                        {"ts", t.start * 1e6}, {"dur", t.dur * 1e6}, {"args", std::move(args)}});
    }
  };
  for (const Task& t : g.tasks) {
    if (t.kind == TaskKind::Reduce || t.kind == TaskKind::Gather) {  // every replica of the stage
      const int64_t stage = map.stage_of(t.cell);
      for (int64_t d = 0; d < map.dp; ++d) emit(t, map.cell(stage, d));
    } else {
      emit(t, t.cell);
    }
  }
  const nlohmann::json doc = {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"},
                              {"otherData", {{"title", title}}}};
  std::ofstream out(path);
  MT_CHECK(out.good(), "cannot write the trace to '{}'", path);
  out << doc.dump();
  MT_CHECK(out.good(), "writing the trace to '{}' failed", path);
}

}  // namespace meshtrain::plan::sim
