// Test and benchmark hook: MESHTRAIN_TEST_SLOW_RANK="r:f" makes rank r take f
// times as long per step (it sleeps (f - 1) x the step's own time after
// each step), a straggler on purpose for the strategies that tolerate one
// (bench/straggler.sh). Unset, or another rank: no delay.
#pragma once

namespace meshtrain {

class SlowRank {
 public:
  static SlowRank from_env(int rank);
  // After a step that took `step_s`: sleeps when this is the slow rank.
  void delay(double step_s) const;
  double factor() const { return factor_; }

 private:
  double factor_ = 1;
};

}  // namespace meshtrain
