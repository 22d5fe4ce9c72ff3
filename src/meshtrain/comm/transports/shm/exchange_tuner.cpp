#include "meshtrain/comm/transports/shm/exchange_tuner.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "meshtrain/core/error.h"

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace meshtrain::comm {

ExchangeTuner::ExchangeTuner() {
  const char* s = std::getenv("MESHTRAIN_SHM_EXCHANGE");
  if (!s || !*s || !std::strcmp(s, "auto")) return;
  forced_ = true;
  if (!std::strcmp(s, "cache")) forced_mode_ = ExchangeMode::Cache;
  else if (!std::strcmp(s, "stream")) forced_mode_ = ExchangeMode::Stream;
  else throw UsageError(fmt::format("MESHTRAIN_SHM_EXCHANGE='{}': expected auto, cache or stream", s));
}

uint64_t ExchangeTuner::now() {
#if defined(__x86_64__)
  return __rdtsc();
#else
  return static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
#endif
}

int ExchangeTuner::class_of(size_t bytes) {
  const int c = bytes ? std::bit_width(bytes) - 1 : 0;
  return c < kClasses ? c : kClasses - 1;
}

ExchangeMode ExchangeTuner::preferred(size_t bytes) const {
  if (forced_) return forced_mode_;
  return bytes < kMinBytes ? ExchangeMode::Cache : classes_[class_of(bytes)].best;
}

ExchangeMode ExchangeTuner::choose(size_t bytes) {
  if (forced_) return forced_mode_;
  if (bytes < kMinBytes) return ExchangeMode::Cache;
  Class& c = classes_[class_of(bytes)];
  const uint32_t op = c.ops++;
  // The first operation of a size is a cold start (fresh pages, cold
  // caches) and goes unmeasured; the next kTrials alternate the two ways.
  if (op <= kTrials) return static_cast<ExchangeMode>(op == 0 ? 0 : (op + 1) & 1);
  if (op % kExploreEvery == 0)
    return c.best == ExchangeMode::Cache ? ExchangeMode::Stream : ExchangeMode::Cache;
  return c.best;
}

void ExchangeTuner::record(ExchangeMode mode, size_t bytes, uint64_t cycles) {
  if (forced_ || bytes < kMinBytes) return;
  Class& c = classes_[class_of(bytes)];
  if (c.ops <= 1) return;  // the cold first operation
  Arm& a = c.arm[static_cast<int>(mode)];
  const double x = static_cast<double>(cycles) / static_cast<double>(bytes);
  if (a.cycles_per_byte == 0) {
    a.cycles_per_byte = x;
  } else if (c.ops <= kTrials + 1) {
    // The trials keep each way's best time: a preempted run only looks slow.
    a.cycles_per_byte = std::min(a.cycles_per_byte, x);
  } else {
    // Then a moving average, as the VM's state changes within minutes. A run
    // counts as at most twice the average: one preempted run moves it by half,
    // a lasting slowdown still shows within a few runs.
    a.cycles_per_byte = 0.5 * a.cycles_per_byte + 0.5 * std::min(x, 2 * a.cycles_per_byte);
  }
  const double cache = c.arm[0].cycles_per_byte, stream = c.arm[1].cycles_per_byte;
  if (cache > 0 && stream > 0) c.best = stream < cache ? ExchangeMode::Stream : ExchangeMode::Cache;
}

}  // namespace meshtrain::comm
