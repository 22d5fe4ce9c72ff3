// Clocks the bench commands time with, and the median they report.
#pragma once
#include <time.h>

#include <chrono>

#include "meshtrain/telemetry/step_timer.h"  // median_of

namespace meshtrain::cli {

using telemetry::median_of;

// Steady wall clock, seconds.
inline double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// CPU seconds used by this process (all threads): on a shared machine this
// tracks our own work even when other jobs steal the cores.
inline double process_cpu_s() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

}  // namespace meshtrain::cli
