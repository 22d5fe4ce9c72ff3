// Stamps when each asynchronous collective finished. A Work handle has no
// timestamps, and the backward thread must not poll, so a helper thread waits
// on the handles in issue order (the progress engine runs them in that order)
// and records the time each one completed. Used for the "total communication
// time" a step spends in bucket reductions, next to the exposed waiting time.
#pragma once
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "meshtrain/comm/work.h"

namespace meshtrain::parallel {

class CompletionClock {
 public:
  CompletionClock();
  ~CompletionClock();
  CompletionClock(const CompletionClock&) = delete;
  CompletionClock& operator=(const CompletionClock&) = delete;

  // Starts a new series of handles (forgets the previous stamps).
  void reset();
  // Adds a handle; its completion time (seconds, steady clock) becomes stamp i.
  void watch(comm::Work work);
  // Blocks until every watched handle is stamped; returns the stamps in order.
  // A failed operation is stamped when it failed (its error surfaces in wait()).
  std::vector<double> stamps();

 private:
  void loop();
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<comm::Work> pending_;
  std::vector<double> done_;
  size_t watched_ = 0;
  bool stop_ = false;
  std::thread thread_;
};

double steady_now_s();

}  // namespace meshtrain::parallel
