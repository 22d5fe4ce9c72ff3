// How a training run differs from a reference run, for the equivalence
// tests: each step's loss against `tol` and every final value against
// `value_tol` (default: `tol`), relative to max(1, |reference|). Empty when
// they agree. Prints the
// largest differences either way, the tolerance's margin (ctest -V).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

namespace meshtrain::testing {

inline std::string run_difference(const std::string& run, const std::vector<float>& losses,
                                  const std::vector<float>& want_losses,
                                  const std::vector<float>& values,
                                  const std::vector<float>& want_values, double tol,
                                  const std::string& value_name = "parameter",
                                  double value_tol = -1) {
  if (value_tol < 0) value_tol = tol;
  std::ostringstream why;
  if (losses.size() != want_losses.size()) return run + ": step counts differ";
  double worst_loss = 0;
  for (size_t i = 0; i < want_losses.size(); ++i) {
    const double d = std::abs(losses[i] - want_losses[i]) / std::max(1.0f, std::abs(want_losses[i]));
    worst_loss = std::max(worst_loss, d);
    if (d > tol) why << run << " step " << i << " loss " << losses[i] << " vs " << want_losses[i] << "; ";
  }
  if (values.size() != want_values.size()) return run + ": " + value_name + " counts differ";
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < want_values.size(); ++i) {
    const double d = std::abs(values[i] - want_values[i]) / std::max(1.0f, std::abs(want_values[i]));
    if (d > worst) worst = d, at = i;
  }
  std::printf("%s loss: largest relative difference %.3g, tolerance %.3g\n", run.c_str(),
              worst_loss, tol);
  std::printf("%s %s: largest relative difference %.3g, tolerance %.3g\n", run.c_str(),
              value_name.c_str(), worst, value_tol);
  if (worst > value_tol) why << run << " " << value_name << " " << at << " differs by " << worst << "; ";
  return why.str();
}

}  // namespace meshtrain::testing
