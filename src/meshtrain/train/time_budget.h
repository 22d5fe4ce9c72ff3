// train.max_minutes: fits a run into a wall-clock budget by choosing its
// length from the step time it measures, so the same configuration takes
// about as long on a slow CPU as on a fast one (which trains more steps).
//
// After the first few steps (the first includes one-off GEMM tuning) it
// decides the number of steps: the budget left over the measured step time
// plus the evaluations' share; train.steps stays the cap. At each evaluation
// it re-projects from the time actually spent since (evaluations and samples
// included) and may only shorten the run. Every decision uses values reduced
// over the ranks (the slowest rank), taken at the same steps on every rank,
// so all ranks agree. The LR schedule ends with the decided length.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace meshtrain::comm {
class Communicator;
}

namespace meshtrain {

class TimeBudget {
 public:
  // minutes <= 0: inactive. first_step: the first step this run takes (0-based;
  // later when resumed). eval_every / eval_batches: the evaluation cadence.
  TimeBudget(double minutes, int64_t first_step, int64_t eval_every, int eval_batches);
  bool active() const { return seconds_ > 0; }

  // After step `done` (1-based count of steps taken) with this rank's step and
  // forward times and the seconds since training started. Collective when it
  // decides (the same steps on every rank). Returns the new total when it
  // changes, with `why` set to a line for the log.
  std::optional<int64_t> after_step(int64_t done, double step_s, double forward_s,
                                    double elapsed_s, int64_t total, comm::Communicator* comm,
                                    std::string& why);

  // Steps timed before the length is decided (after the untimed first one).
  static constexpr int64_t kTimedSteps = 5;

 private:
  double seconds_;
  int64_t first_step_;
  int64_t eval_every_;
  int eval_batches_;
  double sum_step_s_ = 0, sum_forward_s_ = 0;
  int64_t timed_ = 0;
  bool decided_ = false;
  double decided_at_s_ = 0;  // elapsed when decided
  int64_t decided_step_ = 0;
};

}  // namespace meshtrain
