// The last operations of this rank, printed when a collective times out or
// fails, so "who was where" is visible without a debugger.
#pragma once
#include <array>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

#include "meshtrain/comm/work.h"

namespace meshtrain::comm {

class FlightRecorder {
 public:
  static constexpr size_t kEntries = 16;
  static constexpr uint64_t kNoEntry = ~uint64_t{0};
  FlightRecorder();
  // Returns the entry's number (unique: collectives and sends/receives have
  // separate sequence numbers), handed back to finished(). Keeps a copy of
  // `op`, so recording holds no reference to the operation's Work.
  uint64_t started(const OpInfo& op);
  // Marks entry `entry` finished, unless 16 newer operations overwrote it.
  void finished(uint64_t entry, bool ok);
  std::string dump() const;

 private:
  // Times are cycle-counter ticks (a few ns to read, against ~25 ns for the
  // clock), converted to seconds at dump time from the rate since construction.
  struct Entry {
    OpInfo op;
    uint64_t number = kNoEntry;  // started()'s count when recorded
    uint64_t start = 0, end = 0;  // end 0: still running
    bool ok = true;
  };
  mutable std::mutex mu_;
  std::array<Entry, kEntries> ring_{};
  size_t count_ = 0;
  uint64_t ticks0_;
  std::chrono::steady_clock::time_point time0_;
};

}  // namespace meshtrain::comm
