// Stamps when each asynchronous collective finished. A Work handle has no
// timestamps, and the backward thread must not poll, so a helper thread waits
// on the handles in issue order (the progress engine runs them in that order)
// and records the time each one completed. Used for the "total communication
// time" a step spends in bucket reductions, next to the exposed waiting time.
// With a global tracer set (telemetry/trace_writer.h) the same thread records
// each watched collective as a trace event on its "comm progress" track.
#pragma once
#include <condition_variable>
#include <deque>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "meshtrain/comm/work.h"

namespace meshtrain::parallel {

// What the trace shows for one watched collective: it ran from
// max(launch, the previous one's completion) to its own completion.
struct TraceLabel {
  std::string name;            // "" = not traced
  nlohmann::json args;         // bytes, algorithm, bucket
  double launched_s = 0;       // steady clock
};

class CompletionClock {
 public:
  CompletionClock();
  ~CompletionClock();
  CompletionClock(const CompletionClock&) = delete;
  CompletionClock& operator=(const CompletionClock&) = delete;

  // Starts a new series of handles (forgets the previous stamps).
  void reset();
  // Adds a handle; its completion time (seconds, steady clock) becomes stamp i.
  void watch(comm::Work work, TraceLabel label = {});
  // Blocks until every watched handle is stamped; returns the stamps in order.
  // A failed operation is stamped when it failed (its error surfaces in wait()).
  std::vector<double> stamps();

 private:
  void loop();
  std::mutex mu_;
  std::condition_variable cv_;
  void trace(const TraceLabel& label, double done_s);
  std::deque<std::pair<comm::Work, TraceLabel>> pending_;
  std::vector<double> done_;
  size_t watched_ = 0;
  bool stop_ = false;
  const void* named_for_ = nullptr;  // the tracer this thread named its track in
  std::thread thread_;
};

double steady_now_s();

}  // namespace meshtrain::parallel
