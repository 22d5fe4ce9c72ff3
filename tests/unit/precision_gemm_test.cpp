// test-links: mt_kernels
// 16-bit GEMM (bf16 via oneDNN's AVX512_BF16 kernels or the widening
// fallback; f16 via the fallback) against a double-precision reference, for
// every transpose combination, odd shapes, padded leading dimensions and
// both beta values.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "meshtrain/core/error.h"
#include "meshtrain/core/half.h"
#include "meshtrain/core/rng.h"
#include "meshtrain/kernels/cpu/convert.h"
#include "meshtrain/kernels/cpu/gemm_bf16.h"

using namespace meshtrain;
using namespace meshtrain::cpu;

namespace {

struct Shape {
  int64_t M, N, K;
};

std::vector<HalfGemmPath> bf16_paths() {
  std::vector<HalfGemmPath> p{HalfGemmPath::FallbackSgemm};
  if (have_onednn() && cpu_has_avx512_bf16()) p.push_back(HalfGemmPath::OneDnnBf16);
  return p;
}

// Runs one problem and checks every element of C two ways:
//  - against the exact product of the 16-bit-rounded inputs (what the kernel
//    is given): only f32 accumulation error, |err| <= 1e-5 * sum |a||b|
//    (K <= 257: worst case K 2^-24 = 1.5e-5, a blocked sum's actual rounding
//    near sqrt(K) 2^-24 = 1e-6; measured at most 2.7% of the bound; the
//    1e-6 floor only matters for a near-zero scale);
//  - against the product of the original f32 inputs: the 16-bit rounding of
//    both operands, |err| <= 2u * sum |a||b| with u = 2^-8 (bf16) or 2^-11 (f16),
//    both operands of each product rounded by up to u. A worst-case bound
//    (to first order in u), which a few elements come close to: measured 86%
//    (bf16, oneDNN path), 82% (bf16 fallback), 73% (f16), at the scalar, avx2
//    and avx512bf16 levels.
void check(Half fmt, bool ta, bool tb, Shape s, int pad, float alpha, float beta, uint64_t seed) {
  const int64_t M = s.M, N = s.N, K = s.K;
  const int64_t lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
  const int64_t a_rows = ta ? K : M, b_rows = tb ? N : K;
  Rng rng(seed);
  std::vector<float> a(a_rows * lda), b(b_rows * ldb), c0(M * ldc);
  for (auto& x : a) x = rng.normal();
  for (auto& x : b) x = rng.normal();
  for (auto& x : c0) x = rng.normal();
  std::vector<uint16_t> ah(a.size()), bh(b.size());
  to_half(fmt, a.data(), ah.data(), static_cast<int64_t>(a.size()));
  to_half(fmt, b.data(), bh.data(), static_cast<int64_t>(b.size()));
  std::vector<float> ar(a.size()), br(b.size());
  from_half(fmt, ah.data(), ar.data(), static_cast<int64_t>(a.size()));
  from_half(fmt, bh.data(), br.data(), static_cast<int64_t>(b.size()));

  std::vector<float> c = c0;
  gemm_half(fmt, ta, tb, M, N, K, alpha, ah.data(), lda, bh.data(), ldb, beta, c.data(), ldc);

  const double u = fmt == Half::BF16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
  auto A = [&](const std::vector<float>& m, int64_t i, int64_t k) { return ta ? m[k * lda + i] : m[i * lda + k]; };
  auto B = [&](const std::vector<float>& m, int64_t k, int64_t j) { return tb ? m[j * ldb + k] : m[k * ldb + j]; };
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < ldc; ++j) {
      if (j >= N) {  // padding columns are never written
        ASSERT_EQ(c[i * ldc + j], c0[i * ldc + j]) << i << "," << j;
        continue;
      }
      double exact_rounded = 0, exact_f32 = 0, mag = 0;
      for (int64_t k = 0; k < K; ++k) {
        exact_rounded += static_cast<double>(A(ar, i, k)) * B(br, k, j);
        exact_f32 += static_cast<double>(A(a, i, k)) * B(b, k, j);
        mag += std::fabs(static_cast<double>(A(a, i, k)) * B(b, k, j));
      }
      const double base = beta * static_cast<double>(c0[i * ldc + j]);
      const double got = c[i * ldc + j];
      const double scale = std::fabs(alpha) * mag + std::fabs(base);
      ASSERT_NEAR(got, alpha * exact_rounded + base, 1e-5 * scale + 1e-6)
          << half_name(fmt) << " ta " << ta << " tb " << tb << " M " << M << " N " << N << " K "
          << K << " at " << i << "," << j;
      ASSERT_NEAR(got, alpha * exact_f32 + base, 2 * u * std::fabs(alpha) * mag + 1e-5 * scale + 1e-6)
          << half_name(fmt) << " vs f32 inputs, at " << i << "," << j;
    }
}

const Shape kShapes[] = {{1, 1, 1}, {3, 5, 7}, {17, 33, 65}, {64, 48, 40}, {129, 31, 257}, {5, 200, 3}};

}  // namespace

TEST(precision, bf16_gemm_matches_reference_all_transposes_and_paths) {
  uint64_t seed = 1;
  for (HalfGemmPath path : bf16_paths()) {
    set_bf16_gemm_path(path);
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (const Shape& s : kShapes)
          for (float beta : {0.0f, 1.0f}) check(Half::BF16, ta, tb, s, (s.M % 3), 1.0f, beta, ++seed);
    // alpha and beta outside {0, 1} (the oneDNN path hands these to the fallback).
    check(Half::BF16, true, false, {19, 23, 29}, 2, 0.5f, -2.0f, ++seed);
  }
  set_bf16_gemm_path(bf16_paths().back());
}

TEST(precision, f16_gemm_matches_reference_all_transposes) {
  uint64_t seed = 100;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (const Shape& s : kShapes)
        for (float beta : {0.0f, 1.0f}) check(Half::F16, ta, tb, s, 1, 1.0f, beta, ++seed);
}

TEST(precision, gemm_k_zero_scales_c_and_bad_shapes_are_errors) {
  std::vector<float> c{1.f, 2.f, 3.f, 4.f};
  uint16_t dummy = 0;
  gemm_half(Half::BF16, false, false, 2, 2, 0, 1.f, &dummy, 1, &dummy, 2, 0.5f, c.data(), 2);
  EXPECT_EQ(c, (std::vector<float>{0.5f, 1.f, 1.5f, 2.f}));
  EXPECT_THROW(gemm_half(Half::BF16, false, false, 2, 2, 4, 1.f, &dummy, 3, &dummy, 2, 0.f,
                         c.data(), 2),
               Error);  // lda 3 < K 4
}

TEST(precision, gemm_path_is_reported) {
  // This project's machines have AVX512_BF16 and oneDNN: the fast path must be the default there.
  if (have_onednn() && cpu_has_avx512_bf16()) {
    set_bf16_gemm_path(HalfGemmPath::OneDnnBf16);
    const std::string d = half_gemm_description(Half::BF16);
    EXPECT_EQ(d.rfind("bf16 GEMM: oneDNN", 0), 0u) << d;
    EXPECT_NE(d.find("avx512_bf16"), std::string::npos) << d;
    EXPECT_NE(d.find("bf16"), d.rfind("avx512_bf16")) << "the implementation name is missing: " << d;
  }
  set_bf16_gemm_path(HalfGemmPath::FallbackSgemm);
  EXPECT_EQ(half_gemm_description(Half::BF16).rfind("fallback: fp32 sgemm", 0), 0u);
  EXPECT_NE(half_gemm_description(Half::F16).find("fallback: fp32 sgemm"), std::string::npos);
  set_bf16_gemm_path(bf16_paths().back());
}
