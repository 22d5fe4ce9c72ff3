// Fits behind `meshtrain plan --calibrate`: the planner's GEMM efficiency
// curve and memory-bound traffic constant (planner.h) from measurements.
#pragma once
#include <vector>

namespace meshtrain::plan {

struct RatePoint {
  double n = 0;       // the GEMM's smallest dimension
  double gflops = 0;  // measured rate
};

struct GemmCurve {
  double peak_gflops = 0, half_dim = 0;  // rate(n) = peak n / (n + half_dim)
};

// Least squares on 1 / rate = 1 / peak + (half_dim / peak) / n, which is
// linear in 1 / n. Each rate is first raised to the best rate at any smaller
// n: the model's rate never falls with n, and a slower large-n reading is a
// busy machine (another process on the core), not the GEMM. Needs two or more points with distinct n; a fit that
// would give a non-positive peak or half size falls back to the best rate
// measured with half_dim 0.
GemmCurve fit_gemm_curve(const std::vector<RatePoint>& points);

// The constant k with predicted(k) = measured, given the predicted step at
// k = 0 and k = 1, for a constant the model is linear in (the memory-bound
// traffic, full recompute's cost in forwards); never negative.
double fit_traffic(double predicted_at_0, double predicted_at_1, double measured);

}  // namespace meshtrain::plan
