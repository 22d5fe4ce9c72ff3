#include "meshtrain/kernels/cpu/rope.h"

#include <cmath>
#include <numbers>

#include "meshtrain/core/error.h"

namespace meshtrain::cpu {

RopeTable rope_table(int T, int hd, double theta, const RopeScaling& s) {
  MT_CHECK(hd % 2 == 0 && hd > 0, "rotary embeddings need an even head size, got {}", hd);
  MT_CHECK(theta > 0, "rope theta must be positive, got {}", theta);
  RopeTable t;
  t.T = T;
  t.half = hd / 2;
  std::vector<double> inv(t.half);
  for (int j = 0; j < t.half; ++j) {
    inv[j] = 1.0 / std::pow(theta, 2.0 * j / hd);
    if (s.factor > 0) {
      // Long wavelengths are slowed by `factor`, short ones kept, and the
      // band between interpolated (Llama 3.1's published formula).
      const double low = s.original_max_positions / s.low_freq_factor;
      const double high = s.original_max_positions / s.high_freq_factor;
      const double wavelen = 2 * std::numbers::pi / inv[j];
      if (wavelen > low) {
        inv[j] /= s.factor;
      } else if (wavelen >= high) {
        const double smooth = (s.original_max_positions / wavelen - s.low_freq_factor) /
                              (s.high_freq_factor - s.low_freq_factor);
        inv[j] = (1 - smooth) * inv[j] / s.factor + smooth * inv[j];
      }
    }
  }
  t.cos.resize(static_cast<size_t>(T) * t.half);
  t.sin.resize(t.cos.size());
  for (int p = 0; p < T; ++p)
    for (int j = 0; j < t.half; ++j) {
      const double a = p * inv[j];
      t.cos[p * t.half + j] = static_cast<float>(std::cos(a));
      t.sin[p * t.half + j] = static_cast<float>(std::sin(a));
    }
  return t;
}

namespace {
template <bool Inverse>
void rotate(float* x, int64_t B, int64_t T, int64_t nheads, int64_t hd, int64_t row_stride,
            const RopeView& table) {
  MT_CHECK(T <= table.T && hd == 2 * table.half, "rope table for T {} hd {} used at T {} hd {}",
           table.T, 2 * table.half, T, hd);
  const int64_t half = hd / 2;
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < B * T; ++row) {
    const int64_t t = row % T;
    const float* c = table.cos + t * half;
    const float* s = table.sin + t * half;
    for (int64_t h = 0; h < nheads; ++h) {
      float* a = x + row * row_stride + h * hd;
      float* b = a + half;
#pragma omp simd
      for (int64_t j = 0; j < half; ++j) {
        const float av = a[j], bv = b[j];
        if constexpr (Inverse) {
          a[j] = av * c[j] + bv * s[j];
          b[j] = bv * c[j] - av * s[j];
        } else {
          a[j] = av * c[j] - bv * s[j];
          b[j] = bv * c[j] + av * s[j];
        }
      }
    }
  }
}
}  // namespace

void rope_forward(float* x, int64_t B, int64_t T, int64_t nheads, int64_t hd, int64_t row_stride,
                  const RopeView& table) {
  rotate<false>(x, B, T, nheads, hd, row_stride, table);
}

void rope_backward(float* dx, int64_t B, int64_t T, int64_t nheads, int64_t hd,
                   int64_t row_stride, const RopeView& table) {
  rotate<true>(dx, B, T, nheads, hd, row_stride, table);
}

}  // namespace meshtrain::cpu
