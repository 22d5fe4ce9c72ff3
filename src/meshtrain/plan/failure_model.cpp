#include "meshtrain/plan/failure_model.h"

#include <cmath>

#include "meshtrain/core/error.h"

namespace meshtrain::plan {

double expected_goodput(double tau, double delta, double restart, double m) {
  // expm1 keeps precision when tau + delta << M (the usual case).
  return tau / (m * std::exp(restart / m) * std::expm1((tau + delta) / m));
}

double young_interval(double delta, double m) { return std::sqrt(2.0 * delta * m); }

double daly_interval(double delta, double m) {
  if (delta >= 2.0 * m) return m;
  const double x = delta / (2.0 * m);
  return std::sqrt(2.0 * delta * m) * (1.0 + std::sqrt(x) / 3.0 + x / 9.0) - delta;
}

FailurePlan plan_failures(const FailureInputs& in) {
  MT_CHECK(in.gpus >= 1, "failure model: GPUs must be >= 1 (got {})", in.gpus);
  MT_CHECK(in.mtbf_hours > 0 && std::isfinite(in.mtbf_hours), "the MTBF must be > 0 hours (got {})", in.mtbf_hours);
  MT_CHECK(in.checkpoint_s > 0, "the checkpoint cost must be > 0 s (got {})", in.checkpoint_s);
  MT_CHECK(in.restart_s >= 0, "the restart cost must be >= 0 s (got {})", in.restart_s);
  FailurePlan p;
  p.system_mtbf_s = in.mtbf_hours * 3600.0 / static_cast<double>(in.gpus);
  p.young_s = young_interval(in.checkpoint_s, p.system_mtbf_s);
  p.daly_s = daly_interval(in.checkpoint_s, p.system_mtbf_s);
  p.goodput_young = expected_goodput(p.young_s, in.checkpoint_s, in.restart_s, p.system_mtbf_s);
  p.goodput_daly = expected_goodput(p.daly_s, in.checkpoint_s, in.restart_s, p.system_mtbf_s);
  return p;
}

}  // namespace meshtrain::plan
