// A run that restarted (the elastic launcher, or a resume by hand) appends to
// its metrics.jsonl: each attempt re-runs the steps since its checkpoint, so
// a step can have several records. This splits the records into attempts,
// matches each restart with its cause from the launcher's restart log
// (restarts.jsonl: cause, rank, message, recovery time), and counts steps
// run again apart from new ones, for `meshtrain report`. A restart right
// after a checkpoint re-runs nothing and leaves no mark in the steps: a log
// restart takes the next re-run only when the failed rank's last heartbeat
// is at that place (within a step), so no cause is put at the wrong step.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "meshtrain/telemetry/report.h"

namespace meshtrain::telemetry {

struct RestartMark {
  int number = 0;               // 1, 2, ... in order
  std::string cause;            // signal, exit, heartbeat, startup; "" without a restart log
  int rank = -1;                // the rank that failed (-1: unknown)
  std::string message;          // the launcher's words
  int64_t heartbeat_step = -1;  // the failed rank's last heartbeat step (the log's last_step)
  int64_t reached_step = -1;    // the last step recorded before it (-1: none)
  int64_t resumed_step = -1;    // the step the next attempt continued after (-1: none recorded)
  std::optional<double> recovery_s;  // failure to every rank training again
  // Where the picture marks it: after the last step recorded before it, or
  // (a restart that re-ran nothing) the failed rank's last heartbeat; -1: nowhere.
  int64_t mark_step() const { return reached_step >= 0 ? reached_step : heartbeat_step; }
  int64_t steps_lost() const {
    return reached_step >= 0 && resumed_step >= 0 && reached_step > resumed_step ? reached_step - resumed_step : 0;
  }
};

struct RunAttempts {
  std::vector<RestartMark> restarts;
  int64_t new_steps = 0;    // distinct steps
  int64_t rerun_steps = 0;  // records of a step recorded before
  // The last record of every step, in step order (what the run ended with).
  std::vector<MetricsRecord> final_records;
};

// `restart_log`: restarts.jsonl's path ("" or missing: the restarts are seen
// from the steps alone). A malformed log line throws "<path>:<line>: ...".
RunAttempts split_attempts(const std::vector<MetricsRecord>& recs, const std::string& restart_log);

// "restart 1 after step 9: signal, rank 2 (...); resumed from step 8, 1 step run again; ..."
std::string describe(const RestartMark& m);

}  // namespace meshtrain::telemetry
