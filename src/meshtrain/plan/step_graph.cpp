#include "meshtrain/plan/step_graph.h"

#include <algorithm>

#include "meshtrain/core/error.h"

namespace meshtrain::plan::sim {

const char* task_kind_name(TaskKind k) {
  switch (k) {
    case TaskKind::Forward: return "forward";
    case TaskKind::Backward: return "backward";
    case TaskKind::SendForward: return "send activations";
    case TaskKind::SendBackward: return "send gradients";
    case TaskKind::Reduce: return "dp reduce";
    case TaskKind::Gather: return "zero gather";
    case TaskKind::Optimizer: return "optimizer";
  }
  return "?";
}

int32_t StepGraph::add(Task t, std::initializer_list<int> streams) {
  return add(std::move(t), std::vector<int>(streams));
}

int32_t StepGraph::add(Task t, const std::vector<int>& streams) {
  const auto id = static_cast<int32_t>(tasks.size());
  tasks.push_back(std::move(t));
  for (int s : streams) {
    streams_[static_cast<size_t>(s)].push_back(id);
    memberships_.emplace_back(id, s);
  }
  return id;
}

void StepGraph::depend(int32_t task, int32_t on, double release) { edges_.push_back({task, on, release}); }

void StepGraph::run() {
  const size_t n = tasks.size();
  // Compressed adjacency: a task's deps, its dependents, its streams.
  auto offsets = [n](auto key, const auto& items) {
    std::vector<size_t> off(n + 1, 0);
    for (const auto& e : items) ++off[static_cast<size_t>(key(e)) + 1];
    for (size_t i = 0; i < n; ++i) off[i + 1] += off[i];
    return off;
  };
  const auto dep_off = offsets([](const Edge& e) { return e.to; }, edges_);
  const auto out_off = offsets([](const Edge& e) { return e.from; }, edges_);
  const auto mem_off = offsets([](const auto& m) { return m.first; }, memberships_);
  std::vector<const Edge*> deps(edges_.size()), outs(edges_.size());
  std::vector<int32_t> mems(memberships_.size());
  {
    auto fill = dep_off, fill_out = out_off, fill_mem = mem_off;
    for (const Edge& e : edges_) {
      deps[fill[static_cast<size_t>(e.to)]++] = &e;
      outs[fill_out[static_cast<size_t>(e.from)]++] = &e;
    }
    for (const auto& [t, s] : memberships_) mems[fill_mem[static_cast<size_t>(t)]++] = s;
  }
  // A task is ready when every dependency has run and it heads each of its streams.
  std::vector<int64_t> waiting(n);
  for (size_t t = 0; t < n; ++t) waiting[t] = static_cast<int64_t>(dep_off[t + 1] - dep_off[t] + mem_off[t + 1] - mem_off[t]);
  std::vector<size_t> head(streams_.size(), 0);
  std::vector<double> free_at(streams_.size(), 0.0);
  std::vector<int32_t> ready;
  auto release = [&](int32_t t) {
    if (--waiting[static_cast<size_t>(t)] == 0) ready.push_back(t);
  };
  for (size_t t = 0; t < n; ++t)
    if (waiting[t] == 0) ready.push_back(static_cast<int32_t>(t));
  for (const auto& s : streams_)
    if (!s.empty()) release(s.front());
  size_t done = 0;
  while (!ready.empty()) {
    const int32_t id = ready.back();
    ready.pop_back();
    Task& t = tasks[static_cast<size_t>(id)];
    t.start = 0;
    t.binding = -1;
    for (size_t i = mem_off[static_cast<size_t>(id)]; i < mem_off[static_cast<size_t>(id) + 1]; ++i) {
      const auto s = static_cast<size_t>(mems[i]);
      if (free_at[s] > t.start) {
        t.start = free_at[s];
        t.binding = streams_[s][head[s] - 1];
      }
    }
    for (size_t i = dep_off[static_cast<size_t>(id)]; i < dep_off[static_cast<size_t>(id) + 1]; ++i) {
      const Task& d = tasks[static_cast<size_t>(deps[i]->from)];
      const double at = d.start + deps[i]->release * d.dur;
      if (at > t.start) {
        t.start = at;
        t.binding = deps[i]->from;
      }
    }
    t.end = t.start + t.dur;
    ++done;
    for (size_t i = mem_off[static_cast<size_t>(id)]; i < mem_off[static_cast<size_t>(id) + 1]; ++i) {
      const auto s = static_cast<size_t>(mems[i]);
      free_at[s] = t.end;
      if (++head[s] < streams_[s].size()) release(streams_[s][head[s]]);
    }
    for (size_t i = out_off[static_cast<size_t>(id)]; i < out_off[static_cast<size_t>(id) + 1]; ++i)
      release(outs[i]->to);
  }
  MT_CHECK(done == n, "step simulation deadlocks: {} of {} tasks never become ready (an op waits "
           "on one queued behind it)", n - done, n);
}

double StepGraph::end() const {
  double e = 0;
  for (const Task& t : tasks) e = std::max(e, t.end);
  return e;
}

std::vector<int32_t> StepGraph::critical_path() {
  std::vector<int32_t> path;
  if (tasks.empty()) return path;
  int32_t cur = 0;
  for (size_t i = 1; i < tasks.size(); ++i)
    if (tasks[i].end > tasks[static_cast<size_t>(cur)].end) cur = static_cast<int32_t>(i);
  for (; cur >= 0; cur = tasks[static_cast<size_t>(cur)].binding) {
    tasks[static_cast<size_t>(cur)].critical = true;
    path.push_back(cur);
  }
  std::reverse(path.begin(), path.end());
  return path;
}

}  // namespace meshtrain::plan::sim
