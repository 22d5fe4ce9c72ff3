// Elastic restarts around launch/launcher.h: when an attempt fails (a rank
// exits non-zero, is killed, or stops beating), the survivors are stopped and
// the whole job starts again under a new job id, up to max_restarts times. The
// program is expected to resume from its latest complete checkpoint (meshtrain
// train does with checkpoint.resume = "auto"). When the same slot (rank index)
// fails shrink_after times in a row and min_nproc allows, the next attempt
// runs one rank fewer; the checkpoint reader reshards onto the smaller world.
// Every restart is printed to stderr and appended to the restart log (JSON
// lines, docs/FAULT_TOLERANCE.md), with its cause, the restart count and the
// new world size, and so is the time until every rank trains again.
#pragma once
#include <string>
#include <vector>

#include "meshtrain/launch/launcher.h"

namespace meshtrain::launch {

struct ElasticOptions {
  LaunchOptions launch;     // nproc = the starting world size; job_id ignored (fresh per attempt)
  int max_restarts = 0;     // 0: one attempt, like run_local
  int min_nproc = 0;        // 0: never shrink
  int shrink_after = 2;     // consecutive failures of one slot before dropping it
  std::string restart_log;  // JSON lines appended per event; "" = none
};

struct ElasticResult {
  int exit_code = 0;          // 0: the last attempt succeeded
  int restarts = 0;           // attempts after the first
  int final_nproc = 0;
  std::string message;        // why it gave up ("" on success)
  std::vector<LaunchResult> failures;
  std::vector<double> recovery_s;  // per restart: failure seen -> every rank training again
};

ElasticResult run_elastic(const ElasticOptions& opts);

}  // namespace meshtrain::launch
