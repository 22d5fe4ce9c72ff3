// Failures and the checkpoint interval. N GPUs that each fail independently
// (exponentially, mean MTBF) fail as a system every M = MTBF / N on average.
// A job checkpoints every tau seconds of work at a cost delta, and after a
// failure pays R (relaunch and reload; failures may strike during it too)
// and redoes the work since the last checkpoint. Daly 2006 ("A higher order
// estimate of the optimum checkpoint interval for restart dumps", FGCS 22)
// gives the expected wall time of T_solve seconds of work as
//   T_wall = M e^(R/M) (e^((tau + delta)/M) - 1) T_solve / tau,
// so goodput (useful time / wall time) = tau / (M e^(R/M) (e^((tau + delta)/M) - 1)).
// Young 1974's first-order optimum: tau = sqrt(2 delta M). Daly's:
//   tau = sqrt(2 delta M) (1 + sqrt(delta / 2M) / 3 + (delta / 2M) / 9) - delta  for delta < 2M,
//   tau = M otherwise.
#pragma once
#include <cstdint>

namespace meshtrain::plan {

struct FailureInputs {
  int64_t gpus = 0;
  double mtbf_hours = 0;     // per GPU
  double checkpoint_s = 0;   // delta: writing one checkpoint
  double restart_s = 0;      // R: relaunch and load after a failure
};

struct FailurePlan {
  double system_mtbf_s = 0;   // M
  double young_s = 0, daly_s = 0;
  double goodput_young = 0, goodput_daly = 0;
};

// Throws meshtrain::Error for gpus < 1, MTBF <= 0, or negative costs.
FailurePlan plan_failures(const FailureInputs& in);
// Daly's expected goodput at interval tau (seconds of work between checkpoints).
double expected_goodput(double tau_s, double checkpoint_s, double restart_s, double system_mtbf_s);
double young_interval(double checkpoint_s, double system_mtbf_s);
double daly_interval(double checkpoint_s, double system_mtbf_s);

}  // namespace meshtrain::plan
