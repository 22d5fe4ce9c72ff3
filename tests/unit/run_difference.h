// How a training run differs from a reference run, for the equivalence
// tests: each step's loss and every final value, relative to
// max(1, |reference|), against `tol`. Empty when they agree.
#pragma once
#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

namespace meshtrain::testing {

inline std::string run_difference(const std::string& run, const std::vector<float>& losses,
                                  const std::vector<float>& want_losses,
                                  const std::vector<float>& values,
                                  const std::vector<float>& want_values, double tol,
                                  const std::string& value_name = "parameter") {
  std::ostringstream why;
  if (losses.size() != want_losses.size()) return run + ": step counts differ";
  for (size_t i = 0; i < want_losses.size(); ++i)
    if (std::abs(losses[i] - want_losses[i]) > tol * std::max(1.0f, std::abs(want_losses[i])))
      why << run << " step " << i << " loss " << losses[i] << " vs " << want_losses[i] << "; ";
  if (values.size() != want_values.size()) return run + ": " + value_name + " counts differ";
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < want_values.size(); ++i) {
    const double d = std::abs(values[i] - want_values[i]) / std::max(1.0f, std::abs(want_values[i]));
    if (d > worst) worst = d, at = i;
  }
  if (worst > tol) why << run << " " << value_name << " " << at << " differs by " << worst << "; ";
  return why.str();
}

}  // namespace meshtrain::testing
