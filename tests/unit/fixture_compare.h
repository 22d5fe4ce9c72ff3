// Comparing a model's outputs with a stored reference (fixture tests).
//
// Tolerance: |got - want| <= 1e-5 * max(|want|, scale), with scale the largest
// |want| in the reference tensor. The references are float64 math stored as
// f32; an f32 implementation lands within about 1e-6 of the scale (a float32
// PyTorch run does), so 1e-5 leaves margin for a different summation order
// while any real mistake (wrong sign, missing term, wrong layout) is orders of
// magnitude larger. The scale keeps near-zero entries from demanding a
// relative precision that f32 cannot give. Measured over every fixture of
// gpt_fixture_test and llama_test (logits, losses, each gradient tensor) at
// the scalar, avx2 and avx512 levels: at most 1.04e-6 of the scale (GPT,
// h.1.ln_1.weight's gradient, masked batch), 10x under the bound.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

namespace meshtrain::testing {

constexpr double kFixtureRelTol = 1e-5;

// Compares n values of got against want, skipping positions whose target is
// < 0 (targets may be null), reporting the first few offenders.
inline void expect_close(const std::string& what, const float* got, const float* want, int64_t n,
                         const int32_t* targets = nullptr) {
  double scale = 0.0;
  for (int64_t i = 0; i < n; ++i) scale = std::max(scale, std::fabs(double(want[i])));
  int bad = 0;
  double worst = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    if (targets && targets[i] < 0) continue;  // ignored position: no defined loss
    const double err = std::fabs(double(got[i]) - double(want[i]));
    const double tol = kFixtureRelTol * std::max(std::fabs(double(want[i])), scale);
    worst = std::max(worst, scale > 0 ? err / scale : err);
    if (!(err <= tol) && ++bad <= 5)
      ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", want " << want[i]
                    << " (|diff| " << err << " > tolerance " << tol << ")";
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << n
                    << " values out of tolerance; worst |diff|/scale " << worst;
}

}  // namespace meshtrain::testing
