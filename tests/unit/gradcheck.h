// Finite-difference helpers for gradient tests.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "meshtrain/core/rng.h"

namespace meshtrain::testing {

inline std::vector<float> randn(size_t n, uint64_t seed, float scale = 1.0f) {
  Rng r(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = scale * r.normal();
  return v;
}

inline double dot(const std::vector<float>& a, const float* b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

// Compares analytic[i] with the central difference of loss() with respect to
// x[i], for `samples` indices spread over x. Tolerance: |a-n| <= atol + rtol*|n|.
// The central difference's error is (a) rounding: the f32 outputs x[i] feeds
// round at 2^-24 |out|, and their change reaches the quotient divided by
// 2 eps = 0.02, so k unit-sized outputs give ~sqrt(k) * 6e-8 / 0.02 ~ 1e-5;
// (b) truncation eps^2/6 |f'''| = 1.7e-5 |f'''| (zero for the linear
// kernels: matmul, encoder). Defaults: atol 1e-3, rtol 2e-2. Measured over
// kernels_test's checks at the scalar, avx2, avx512 and avx512bf16 levels:
// largest |a-n| 3.2e-5 (matmul dw), under 1% of the tolerance; a wrong
// backward (a missing term, a wrong sign or index) is off by O(|gradient|).
inline void expect_gradient(const char* what, std::vector<float>& x, const std::vector<float>& analytic,
                            const std::function<double()>& loss, float eps = 1e-2f,
                            double rtol = 2e-2, double atol = 1e-3, size_t samples = 40) {
  ASSERT_EQ(x.size(), analytic.size());
  size_t step = std::max<size_t>(1, x.size() / samples);
  for (size_t i = 0; i < x.size(); i += step) {
    float orig = x[i];
    x[i] = orig + eps;
    double lp = loss();
    x[i] = orig - eps;
    double lm = loss();
    x[i] = orig;
    double num = (lp - lm) / (2.0 * eps);
    EXPECT_NEAR(analytic[i], num, atol + rtol * std::fabs(num)) << what << " index " << i;
  }
}

}  // namespace meshtrain::testing
