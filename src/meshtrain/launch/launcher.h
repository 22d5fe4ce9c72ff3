// Starts N local processes with meshtrain's environment contract
// (MESHTRAIN_RANK, _WORLD_SIZE, _LOCAL_RANK, _LOCAL_WORLD_SIZE, _JOB_ID),
// prefixes every output line with its rank, forwards SIGINT/SIGTERM/SIGHUP,
// and when one rank fails stops the others and reports which and why.
#pragma once
#include <string>
#include <vector>

namespace meshtrain::launch {

struct LaunchOptions {
  int nproc = 1;
  std::vector<std::string> command;  // argv; command[0] is looked up in PATH
  bool prefix_output = true;         // "[rank r] " before every line
  double grace_s = 5.0;              // SIGTERM, then SIGKILL after this long
  std::string job_id;                // empty: a fresh random id
};

struct LaunchResult {
  int exit_code = 0;       // 0 when every rank exited 0
  int failed_rank = -1;    // first rank that failed
  std::string message;     // "rank 2 exited with status 3" / "rank 1 was killed by signal 9 (Killed)"
};

// Runs the job to completion. Shared memory the job left in /dev/shm (a
// crash before its ranks unlinked it) is removed at the end.
LaunchResult run_local(const LaunchOptions& opts);

}  // namespace meshtrain::launch
