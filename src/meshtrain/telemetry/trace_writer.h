// Chrome/Perfetto trace: "X" (complete) events, one process per rank
// (pid = rank) and one track per thread (tid, named by "M" thread_name
// metadata). Open the merged trace.json in https://ui.perfetto.dev or
// chrome://tracing.
//
// Each rank records into its own Tracer and writes `trace_rank<r>.json`;
// merge_trace_files / merge_trace_dir combine them into one trace.json.
// Timestamps are microseconds of the system clock, so ranks on one machine
// line up; the merge shifts them to start at 0.
//
// Recording is thread-safe (the communication progress thread records its
// bucket collectives beside the compute thread's layers). A disabled Tracer,
// or a null Tracer*, costs one branch per scope.
#pragma once
#include <cstdint>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace meshtrain::telemetry {

class Tracer {
 public:
  Tracer() = default;  // disabled
  // Enabled; `path` is where write() puts this rank's file (see rank_trace_path).
  Tracer(std::string path, int rank, size_t max_events = 2'000'000);
  ~Tracer();  // writes the file if enabled and not yet written
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  bool enabled() const { return enabled_; }
  int rank() const { return rank_; }
  // Microseconds on the trace clock (system clock).
  static double now_us();

  // Names the calling thread's track ("main", "comm progress"); a thread that
  // records without a name gets "thread <tid>".
  void set_thread_name(const std::string& name);
  // One complete event on the calling thread's track. `args` (a JSON object or
  // null) shows in the event's details: bucket bytes, algorithm, layer.
  void complete(std::string_view name, std::string_view cat, double begin_us, double dur_us,
                nlohmann::json args = nullptr);
  // An instant event ("i") on the calling thread's track (e.g. "eval", "checkpoint").
  void instant(std::string_view name, std::string_view cat, nlohmann::json args = nullptr);

  size_t event_count() const;
  size_t dropped() const;  // events past max_events (not recorded)
  // Writes {"traceEvents":[...]} to the path (atomically: temp + rename).
  // May be called again to rewrite with more events.
  void write();
  // The whole trace as JSON (for tests).
  nlohmann::json to_json() const;

 private:
  int tid_locked();  // small id of the calling thread; mutex held
  bool enabled_ = false;
  int rank_ = 0;
  size_t max_events_ = 0;
  std::string path_;
  mutable std::mutex mu_;
  std::vector<nlohmann::json> events_;
  std::vector<std::pair<std::thread::id, std::string>> threads_;  // index = tid
  size_t dropped_ = 0;
  bool written_ = false;
};

// RAII: records a complete event from construction to destruction.
//   TraceScope s(&tracer, "forward layer 3", "compute");
//   TraceScope s(tracer, "allreduce bucket 2", "comm", {{"bytes", n}, {"algorithm", "ring"}});
class TraceScope {
 public:
  TraceScope(Tracer* t, std::string_view name, std::string_view cat, nlohmann::json args = nullptr)
      : t_(t && t->enabled() ? t : nullptr) {
    if (t_) begin(name, cat, std::move(args));
  }
  TraceScope(Tracer& t, std::string_view name, std::string_view cat, nlohmann::json args = nullptr)
      : TraceScope(&t, name, cat, std::move(args)) {}
  // Indexed name "<prefix> <index>" ("forward layer 3"), formatted only when
  // tracing is on, so per-layer scopes cost one branch when it is off.
  TraceScope(Tracer* t, std::string_view prefix, int64_t index, std::string_view cat,
             nlohmann::json args = nullptr)
      : t_(t && t->enabled() ? t : nullptr) {
    if (t_) begin(indexed_name(prefix, index), cat, std::move(args));
  }
  ~TraceScope() {
    if (t_) end();
  }
  TraceScope(const TraceScope&) = delete;
  TraceScope& operator=(const TraceScope&) = delete;
  // Adds or replaces an argument before the scope closes (e.g. a result size).
  void arg(const std::string& key, nlohmann::json value) {
    if (t_) args_[key] = std::move(value);
  }

 private:
  static std::string indexed_name(std::string_view prefix, int64_t index);
  void begin(std::string_view name, std::string_view cat, nlohmann::json args);
  void end();
  Tracer* t_;
  std::string name_, cat_;
  nlohmann::json args_;
  double t0_ = 0;
};

// The process-wide tracer, for code that has no Tracer passed to it (layers,
// the communication progress thread): null unless set. The trainer sets it
// after creating its Tracer and clears it (nullptr) before destroying it.
void set_global_tracer(Tracer* t);
Tracer* global_tracer();

// "<dir>/trace_rank<r>.json".
std::string rank_trace_path(const std::string& dir, int rank);
// Combines per-rank trace files into one (timestamps shifted so the earliest
// event is at 0, process names "rank r" sorted by rank). Throws
// meshtrain::Error naming a file that is missing or not a trace.
void merge_trace_files(const std::vector<std::string>& inputs, const std::string& output);
// Merges every trace_rank*.json in `dir` into `dir`/trace.json; returns the
// number of rank files merged (0: none, nothing written).
int merge_trace_dir(const std::string& dir);

}  // namespace meshtrain::telemetry
