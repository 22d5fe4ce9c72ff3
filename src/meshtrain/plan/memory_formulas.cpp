#include "meshtrain/plan/memory_formulas.h"

#include "meshtrain/core/error.h"

namespace meshtrain::plan {

double zero_model_state_bytes(double psi, int64_t dp, int stage, StateBytes b) {
  MT_CHECK(dp >= 1 && stage >= 0 && stage <= 3, "ZeRO stage {} over {} ranks", stage, dp);
  const double n = static_cast<double>(dp);
  switch (stage) {
    case 0: return (b.p + b.g + b.k) * psi;
    case 1: return (b.p + b.g) * psi + b.k * psi / n;
    case 2: return b.p * psi + (b.g + b.k) * psi / n;
    default: return (b.p + b.g + b.k) * psi / n;
  }
}

const char* recompute_policy_name(RecomputePolicy r) {
  switch (r) {
    case RecomputePolicy::None: return "none";
    case RecomputePolicy::Selective: return "selective";
    default: return "full";
  }
}

double activation_bytes_per_layer(double s, double b, double h, double a, int64_t t,
                                  bool sequence_parallel, RecomputePolicy recompute) {
  const double sbh = s * b * h, tt = static_cast<double>(t);
  const double attention = 5.0 * a * s / (h * tt);  // the a s^2 score and softmax tensors
  if (recompute == RecomputePolicy::Full) return 2.0 * sbh;
  if (t == 1 && !sequence_parallel)  // Table 2's first row: 34 + 5as/h (t = 1 in the tp row too)
    return sbh * (34.0 + (recompute == RecomputePolicy::Selective ? 0.0 : attention));
  const double rest = sequence_parallel ? 34.0 / tt : 10.0 + 24.0 / tt;
  return sbh * (rest + (recompute == RecomputePolicy::Selective ? 0.0 : attention));
}

}  // namespace meshtrain::plan
