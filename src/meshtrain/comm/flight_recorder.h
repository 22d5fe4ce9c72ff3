// The last operations of this rank, printed when a collective times out or
// fails, so "who was where" is visible without a debugger.
#pragma once
#include <array>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <memory>
#include <string>

#include "meshtrain/comm/work.h"

namespace meshtrain::comm {

class FlightRecorder {
 public:
  static constexpr size_t kEntries = 16;
  void started(std::shared_ptr<const WorkState> work, std::chrono::steady_clock::time_point start);
  void finished(uint64_t seq, bool ok);
  std::string dump() const;

 private:
  struct Entry {
    uint64_t seq = 0;
    std::shared_ptr<const WorkState> work;
    std::chrono::steady_clock::time_point start{};
    double seconds = -1;  // -1: still running
    bool ok = true;
  };
  mutable std::mutex mu_;
  std::array<Entry, kEntries> ring_{};
  size_t count_ = 0;
};

}  // namespace meshtrain::comm
