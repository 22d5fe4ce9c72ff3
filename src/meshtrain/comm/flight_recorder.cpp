#include "meshtrain/comm/flight_recorder.h"

#include <fmt/format.h>

namespace meshtrain::comm {

void FlightRecorder::started(std::shared_ptr<const WorkState> work,
                             std::chrono::steady_clock::time_point start) {
  std::lock_guard lock(mu_);
  Entry& e = ring_[count_++ % kEntries];
  e.seq = work->seq;
  e.work = std::move(work);
  e.start = start;
  e.seconds = -1;
  e.ok = true;
}

void FlightRecorder::finished(uint64_t seq, bool ok) {
  std::lock_guard lock(mu_);
  for (auto& e : ring_)
    if (e.seq == seq && e.seconds < 0) {
      e.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - e.start).count();
      e.ok = ok;
    }
}

std::string FlightRecorder::dump() const {
  std::lock_guard lock(mu_);
  std::string out;
  size_t first = count_ > kEntries ? count_ - kEntries : 0;
  for (size_t i = first; i < count_; ++i) {
    const Entry& e = ring_[i % kEntries];
    out += e.seconds < 0 ? fmt::format("  {}: running\n", e.work->what())
                         : fmt::format("  {}: {} in {:.1f} us\n", e.work->what(), e.ok ? "done" : "FAILED",
                                       e.seconds * 1e6);
  }
  return out.empty() ? "  (no operations yet)\n" : out;
}

}  // namespace meshtrain::comm
