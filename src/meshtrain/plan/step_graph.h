// The task graph of one simulated training step (step_simulator's insides).
//
// A cell is one tensor-parallel group: pipeline stage s of data-parallel
// replica d, its tp ranks (s * dp + d) * tp + t (the engine's mesh order,
// parallel/mesh.h). tp ranks run every op together (their collectives sit
// inside each op), so a cell has one timeline: four in-order streams
// (compute; dp/ZeRO collectives; pipeline sends forward and backward, one
// link each way). A task occupies one or more streams (a data-parallel
// collective: the comm stream of every replica's cell of its stage) and
// starts when all of them are free and its dependencies have reached their
// release points (a bucket is released part-way through a backward).
#pragma once
#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

namespace meshtrain::plan::sim {

enum class TaskKind : uint8_t { Forward, Backward, SendForward, SendBackward, Reduce, Gather, Optimizer };
const char* task_kind_name(TaskKind k);

enum Stream : int { kCompute = 0, kComm = 1, kLinkForward = 2, kLinkBackward = 3, kStreamsPerCell = 4 };

struct Task {
  TaskKind kind = TaskKind::Forward;
  int32_t cell = 0;  // a collective: the cell of replica 0 (all replicas take part)
  int32_t micro_batch = -1, chunk = -1;
  double dur = 0;
  double start = 0, end = 0;
  int32_t binding = -1;  // the task whose end (or release point) set the start; -1: t = 0
  bool critical = false;
};

struct CellMap {
  int64_t dp = 1, tp = 1, pp = 1, chunks = 1, gpus_per_node = 8;
  int64_t cells() const { return dp * pp; }
  int64_t cell(int64_t stage, int64_t replica) const { return stage * dp + replica; }
  int64_t stage_of(int64_t cell) const { return cell / dp; }
  int64_t replica_of(int64_t cell) const { return cell % dp; }
  int64_t first_rank(int64_t cell) const { return cell * tp; }
  int64_t cell_of_rank(int64_t rank) const { return rank / tp; }
  int stream(int64_t cell, Stream s) const { return static_cast<int>(cell * kStreamsPerCell + s); }
};

class StepGraph {
 public:
  explicit StepGraph(int streams) : streams_(static_cast<size_t>(streams)) {}
  int32_t add(Task t, std::initializer_list<int> streams);
  int32_t add(Task t, const std::vector<int>& streams);
  // `task` starts no earlier than `on`'s start + release x its duration.
  void depend(int32_t task, int32_t on, double release = 1.0);
  // Every task's start and end; throws meshtrain::Error when the graph
  // deadlocks (an op waits on one that is queued behind it).
  void run();
  // Marks and returns the chain of bindings back from the latest end.
  std::vector<int32_t> critical_path();
  double end() const;

  std::vector<Task> tasks;
  const std::vector<int32_t>& stream(int s) const { return streams_[static_cast<size_t>(s)]; }

 private:
  struct Edge {
    int32_t to, from;
    double release;
  };
  std::vector<std::vector<int32_t>> streams_;  // task ids in issue order
  std::vector<std::pair<int32_t, int32_t>> memberships_;  // (task, stream)
  std::vector<Edge> edges_;
};

// Chrome/Perfetto JSON: one process per node, four threads per written
// rank (tid 4 rank + stream: compute, dp comm, sends forward, sends
// backward); ts and dur in microseconds.
void write_step_trace(const std::string& path, const StepGraph& g, const CellMap& map,
                      const std::vector<int64_t>& ranks, const std::string& title);

}  // namespace meshtrain::plan::sim
