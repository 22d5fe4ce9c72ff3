// Starts N local processes with meshtrain's environment contract
// (MESHTRAIN_RANK, _WORLD_SIZE, _LOCAL_RANK, _LOCAL_WORLD_SIZE, _JOB_ID),
// prefixes every output line with its rank, forwards SIGINT/SIGTERM/SIGHUP,
// watches the ranks' heartbeats (launch/heartbeat.h), and when one rank fails
// (exits non-zero, is killed, or stops beating) stops the others (SIGTERM,
// SIGKILL after a grace period) and reports which rank and why. One attempt
// of a job; launch/elastic.h restarts failed attempts.
#pragma once
#include <chrono>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace meshtrain::launch {

struct LaunchOptions {
  int nproc = 1;
  std::vector<std::string> command;  // argv; command[0] is looked up in PATH
  bool prefix_output = true;         // "[rank r] " before every line
  double grace_s = 5.0;              // SIGTERM, then SIGKILL after this long
  std::string job_id;                // empty: a fresh random id
  // A rank that has begun training (its first heartbeat) and then goes this
  // long without another is declared hung. 0 = not watched.
  double heartbeat_timeout_s = 0;
  // A rank that has not begun its first step this long after its start is
  // declared failed to start. 0 = wait as long as it takes (startup and
  // checkpoint loading are never mistaken for a hang).
  double startup_timeout_s = 0;
  // Extra environment for every rank (name, value).
  std::vector<std::pair<std::string, std::string>> env;
  // Called once, from the launcher's loop, when every rank has begun its
  // first step (heartbeats), with the time that happened.
  std::function<void(std::chrono::steady_clock::time_point)> on_all_training;
};

enum class FailureKind {
  None,         // every rank exited 0
  Exit,         // a rank exited with a non-zero status
  Signal,       // a rank was killed by a signal
  Hung,         // a rank stopped beating for heartbeat_timeout_s
  NoStart,      // a rank did not begin training within startup_timeout_s
  Interrupted,  // the launcher itself got SIGINT/SIGTERM/SIGHUP (not restartable)
};
const char* failure_kind_name(FailureKind k);  // "exit", "signal", "heartbeat", ...

struct LaunchResult {
  int exit_code = 0;       // 0 when every rank exited 0
  int failed_rank = -1;    // first rank that failed
  std::string message;     // "rank 2 exited with status 3" / "rank 1 was killed by signal 9 (Killed)"
  FailureKind kind = FailureKind::None;
  int exit_status = -1;    // Exit: the status
  int signal = 0;          // Signal: the signal; Interrupted: the signal the launcher got
  int64_t last_step = -1;  // the failed rank's last heartbeat step (1-based), -1 if none
  std::string job_id;
  std::chrono::steady_clock::time_point failed_at{};  // when the launcher saw the failure
};

// Runs the job to completion. Shared memory the job left in /dev/shm (a
// crash before its ranks unlinked it) is removed at the end, and so is any
// process left in a rank's process group.
LaunchResult run_local(const LaunchOptions& opts);

}  // namespace meshtrain::launch
