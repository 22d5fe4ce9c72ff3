#include "meshtrain/plan/calibration_fit.h"

#include <algorithm>

#include "meshtrain/core/error.h"

namespace meshtrain::plan {

GemmCurve fit_gemm_curve(const std::vector<RatePoint>& points) {
  MT_CHECK(points.size() >= 2, "a GEMM curve needs two or more measurements (got {})", points.size());
  double sx = 0, sy = 0, sxx = 0, sxy = 0, best = 0;
  std::vector<RatePoint> sorted = points;
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const RatePoint& a, const RatePoint& b) { return a.n < b.n; });
  for (const RatePoint& p : sorted) {
    MT_CHECK(p.n > 0 && p.gflops > 0, "GEMM measurement n {} rate {}: both must be positive", p.n, p.gflops);
    best = std::max(best, p.gflops);  // the best so far, at this n or below
    const double x = 1.0 / p.n, y = 1.0 / best;
    sx += x, sy += y, sxx += x * x, sxy += x * y;
  }
  const double k = static_cast<double>(points.size());
  const double det = k * sxx - sx * sx;
  MT_CHECK(det > 0, "GEMM measurements need two or more distinct sizes");
  const double slope = (k * sxy - sx * sy) / det, intercept = (sy - slope * sx) / k;
  if (intercept <= 0 || slope < 0) return {best, 0};
  return {1.0 / intercept, slope / intercept};
}

double fit_traffic(double predicted_at_0, double predicted_at_1, double measured) {
  const double unit = predicted_at_1 - predicted_at_0;
  MT_CHECK(unit > 0, "the reference step has no memory-bound work to fit");
  return std::max(0.0, (measured - predicted_at_0) / unit);
}

}  // namespace meshtrain::plan
