#include "meshtrain/train/time_budget.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "meshtrain/comm/communicator.h"

namespace meshtrain {

namespace {
double slowest(double v, comm::Communicator* comm) {
  return comm && comm->valid() ? comm->allreduce_scalar(v, comm::ReduceOp::Max) : v;
}
}  // namespace

TimeBudget::TimeBudget(double minutes, int64_t first_step, int64_t eval_every, int eval_batches)
    : seconds_(minutes > 0 ? minutes * 60.0 : 0.0),
      first_step_(first_step),
      eval_every_(eval_every),
      eval_batches_(eval_batches) {}

std::optional<int64_t> TimeBudget::after_step(int64_t done, double step_s, double forward_s,
                                              double elapsed_s, int64_t total,
                                              comm::Communicator* comm, std::string& why) {
  if (!active() || done >= total) return std::nullopt;
  if (!decided_) {
    if (done - first_step_ < 2) return std::nullopt;  // the first step tunes the GEMMs
    sum_step_s_ += step_s;
    sum_forward_s_ += forward_s;
    if (++timed_ < kTimedSteps) return std::nullopt;
    const double step = slowest(sum_step_s_ / timed_, comm);
    const double fwd = slowest(sum_forward_s_ / timed_, comm);
    const double elapsed = slowest(elapsed_s, comm);
    // An evaluation runs eval_batches forward passes every eval_every steps.
    const double per_step = step + (eval_every_ > 0 ? eval_batches_ * fwd / eval_every_ : 0.0);
    const double left = seconds_ - elapsed;
    const int64_t fit = static_cast<int64_t>(std::floor(std::max(0.0, left) / per_step));
    const int64_t decided = std::clamp(done + fit, done + 1, total);
    decided_ = true;
    decided_at_s_ = elapsed;
    decided_step_ = done;
    why = fmt::format("time budget {:.3g} min: {:.0f} ms per step measured (+{:.0f} ms for "
                      "evaluations) -> {} steps{}, about {:.2g} min in all",
                      seconds_ / 60, step * 1e3, (per_step - step) * 1e3, decided,
                      decided == total ? " (train.steps, the cap)" : "",
                      (elapsed + (decided - done) * per_step) / 60);
    return decided == total ? std::nullopt : std::optional<int64_t>(decided);
  }
  // Re-project at evaluations from the time really spent since deciding.
  if (eval_every_ <= 0 || done % eval_every_ != 0 || done <= decided_step_) return std::nullopt;
  const double elapsed = slowest(elapsed_s, comm);
  const double per_step = (elapsed - decided_at_s_) / static_cast<double>(done - decided_step_);
  const int64_t fit =
      static_cast<int64_t>(std::floor(std::max(0.0, seconds_ - elapsed) / per_step));
  const int64_t projected = std::max(done + 1, done + fit);
  if (projected >= total) return std::nullopt;
  why = fmt::format("time budget: {:.0f} ms per step so far (evaluations and samples included) "
                    "-> {} steps instead of {}", per_step * 1e3, projected, total);
  return projected;
}

}  // namespace meshtrain
