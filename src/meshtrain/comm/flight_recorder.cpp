#include "meshtrain/comm/flight_recorder.h"

#include <fmt/format.h>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace meshtrain::comm {

namespace {
uint64_t ticks() {
#if defined(__x86_64__)
  return __rdtsc();
#else
  return static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
#endif
}
}  // namespace

FlightRecorder::FlightRecorder() : ticks0_(ticks()), time0_(std::chrono::steady_clock::now()) {}

uint64_t FlightRecorder::started(const OpInfo& op) {
  OpInfo copy = op;  // may throw (the detail string): before anything changes
  std::lock_guard lock(mu_);
  const uint64_t number = count_++;
  Entry& e = ring_[number % kEntries];
  e.op = std::move(copy);
  e.number = number;
  e.start = ticks();
  e.end = 0;
  e.ok = true;
  return number;
}

void FlightRecorder::finished(uint64_t entry, bool ok) {
  const uint64_t now = ticks();
  std::lock_guard lock(mu_);
  Entry& e = ring_[entry % kEntries];
  if (e.number != entry || e.end != 0) return;  // overwritten by 16 newer operations
  e.end = now == 0 ? 1 : now;
  e.ok = ok;
}

std::string FlightRecorder::dump() const {
  std::lock_guard lock(mu_);
  const uint64_t now = ticks();
  const double elapsed_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - time0_).count();
  // Ticks per second since construction; without a usable rate, print ticks.
  const double rate = now > ticks0_ && elapsed_s > 0 ? (now - ticks0_) / elapsed_s : 0;
  auto span = [&](uint64_t a, uint64_t b) {
    if (rate <= 0) return fmt::format("{} ticks", b - a);
    const double us = (b - a) / rate * 1e6;
    return us >= 1e6 ? fmt::format("{:.2f} s", us / 1e6) : fmt::format("{:.1f} us", us);
  };
  std::string out;
  const size_t first = count_ > kEntries ? count_ - kEntries : 0;
  for (size_t i = first; i < count_; ++i) {
    const Entry& e = ring_[i % kEntries];
    out += e.end == 0 ? fmt::format("  {}: running for {}\n", e.op.what(), span(e.start, now))
                      : fmt::format("  {}: {} in {}\n", e.op.what(), e.ok ? "done" : "FAILED",
                                    span(e.start, e.end));
  }
  return out.empty() ? "  (no operations yet)\n" : out;
}

}  // namespace meshtrain::comm
