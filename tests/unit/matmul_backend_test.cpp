// test-links: mt_kernels
// The f32 GEMM backends (OpenBLAS, oneDNN) against a double-precision
// reference for every transpose combination, odd shapes, padded leading
// dimensions, beta 0 and 1 and two thread counts; the per-problem choice of
// MESHTRAIN_SGEMM=auto (made once, never changed, exact on first use) and the
// forced and deterministic policies.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "meshtrain/core/error.h"
#include "meshtrain/core/rng.h"
#include "meshtrain/core/threads.h"
#include "meshtrain/kernels/cpu/matmul.h"
#include "meshtrain/kernels/cpu/sgemm_backend.h"
#include "meshtrain/kernels/cpu/sgemm_onednn.h"

using namespace meshtrain;
using namespace meshtrain::cpu;

namespace {

std::vector<SgemmBackend> backends() {
  std::vector<SgemmBackend> b{SgemmBackend::OpenBlas};
  if (onednn_sgemm_available()) b.push_back(SgemmBackend::OneDnn);
  return b;
}

// A problem with its operands, C's start value and a double reference.
struct Problem {
  bool ta, tb;
  int64_t M, N, K, lda, ldb, ldc;
  std::vector<float> a, b, c0;

  Problem(bool ta_, bool tb_, int64_t M_, int64_t N_, int64_t K_, int64_t pad, uint64_t seed)
      : ta(ta_), tb(tb_), M(M_), N(N_), K(K_) {
    lda = (ta ? M : K) + pad;
    ldb = (tb ? K : N) + pad;
    ldc = N + pad;
    Rng rng(seed);
    a.resize((ta ? K : M) * lda);
    b.resize((tb ? N : K) * ldb);
    c0.resize(M * ldc);
    for (auto& x : a) x = rng.normal();
    for (auto& x : b) x = rng.normal();
    for (auto& x : c0) x = rng.normal();
  }
  double A(int64_t i, int64_t k) const { return ta ? a[k * lda + i] : a[i * lda + k]; }
  double B(int64_t k, int64_t j) const { return tb ? b[j * ldb + k] : b[k * ldb + j]; }

  // Every element of c against alpha * op(A) op(B) + beta * c0, within f32
  // accumulation error of the products' magnitudes; padding never written.
  // 1e-5 of sum |a b|: over K <= 512 terms the worst case is K 2^-24 = 3e-5,
  // a blocked sum's actual rounding a random walk near sqrt(K) 2^-24 =
  // 1.4e-6; 1e-5 sits between. The 1e-6 floor only matters for a near-zero
  // scale. Measured: at most 3.2% of the bound over every backend, thread
  // count and problem, at the scalar, avx2 and avx512 levels.
  void check(const std::vector<float>& c, float alpha, float beta, const std::string& what) const {
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < ldc; ++j) {
        if (j >= N) {
          ASSERT_EQ(c[i * ldc + j], c0[i * ldc + j]) << what << ": padding written at " << i << "," << j;
          continue;
        }
        double exact = 0, mag = 0;
        for (int64_t k = 0; k < K; ++k) {
          exact += A(i, k) * B(k, j);
          mag += std::fabs(A(i, k) * B(k, j));
        }
        const double base = beta * static_cast<double>(c0[i * ldc + j]);
        ASSERT_NEAR(c[i * ldc + j], alpha * exact + base,
                    1e-5 * (std::fabs(alpha) * mag + std::fabs(base)) + 1e-6)
            << what << " ta " << ta << " tb " << tb << " M " << M << " N " << N << " K " << K
            << " at " << i << "," << j;
      }
  }
  std::vector<float> run_sgemm(float alpha, float beta) const {
    std::vector<float> c = c0;
    sgemm(ta, tb, M, N, K, alpha, a.data(), lda, b.data(), ldb, beta, c.data(), ldc);
    return c;
  }
  SgemmBackend backend(float alpha, float beta) const {
    return sgemm_backend_for(ta, tb, M, N, K, alpha, a.data(), lda, b.data(), ldb, beta,
                             c0.data(), ldc);
  }
};

// Restores the policy and the thread count a test changed.
struct PolicyGuard {
  SgemmPolicy policy = sgemm_policy();
  int threads = thread_count();
  ~PolicyGuard() {
    set_sgemm_policy(policy);
    set_thread_count(threads);
    unsetenv("MESHTRAIN_SGEMM");
  }
};

}  // namespace

TEST(matmul, every_backend_matches_reference) {
  PolicyGuard guard;
  struct Shape {
    int64_t M, N, K;
  };
  const Shape shapes[] = {{1, 1, 1}, {5, 7, 3}, {33, 17, 65}, {70, 129, 96}};
  uint64_t seed = 1;
  for (int threads : {1, 2}) {
    set_thread_count(threads);
    for (SgemmBackend be : backends())
      for (bool ta : {false, true})
        for (bool tb : {false, true})
          for (const Shape& s : shapes)
            for (int pad : {0, 3})
              for (float beta : {0.f, 1.f}) {
                const Problem p(ta, tb, s.M, s.N, s.K, pad, ++seed);
                std::vector<float> c = p.c0;
                sgemm_with(be, ta, tb, p.M, p.N, p.K, 1.f, p.a.data(), p.lda, p.b.data(), p.ldb,
                           beta, c.data(), p.ldc);
                p.check(c, 1.f, beta,
                        std::string(sgemm_backend_name(be)) + " threads " + std::to_string(threads) +
                            " pad " + std::to_string(pad) + " beta " + std::to_string(beta));
                if (HasFatalFailure()) return;
              }
  }
}

// sgemm_bias on each backend (oneDNN's fused bias, OpenBLAS's seeded C) and
// under auto: op(A) op(B) + bias (+ C), each bias value on its own column.
TEST(matmul, bias_gemm_matches_reference_on_every_backend) {
  PolicyGuard guard;
  set_sgemm_policy(SgemmPolicy::Auto);
  struct Shape {
    int64_t M, N, K;
  };
  // The last is above auto's timing floor (2MNK = 17 MFLOP).
  const Shape shapes[] = {{1, 9, 5}, {5, 7, 3}, {33, 17, 65}, {96, 208, 420}};
  uint64_t seed = 100;
  for (const Shape& sh : shapes)
    for (bool ta : {false, true})
      for (bool accumulate : {false, true}) {
        const Problem p(ta, true, sh.M, sh.N, sh.K, 0, ++seed);
        std::vector<float> bias(sh.N);
        for (int64_t j = 0; j < sh.N; ++j) bias[j] = 0.5f * static_cast<float>(j) - 3.f;
        // The reference: C0 (when accumulating) plus the bias, then the product added.
        Problem seeded = p;
        for (int64_t i = 0; i < p.M; ++i)
          for (int64_t j = 0; j < p.N; ++j)
            seeded.c0[i * p.ldc + j] = (accumulate ? p.c0[i * p.ldc + j] : 0.f) + bias[j];
        const std::string what = std::string("M ") + std::to_string(sh.M) + " ta " +
                                 std::to_string(ta) + " accumulate " + std::to_string(accumulate);
        for (SgemmBackend be : backends()) {
          std::vector<float> c = p.c0;
          sgemm_with_bias(be, ta, true, p.M, p.N, p.K, p.a.data(), p.lda, p.b.data(), p.ldb,
                          bias.data(), accumulate, c.data());
          seeded.check(c, 1.f, 1.f, std::string(sgemm_backend_name(be)) + " " + what);
          if (HasFatalFailure()) return;
        }
        std::vector<float> c = p.c0;
        sgemm_bias(ta, true, p.M, p.N, p.K, p.a.data(), p.lda, p.b.data(), p.ldb, bias.data(),
                   accumulate, c.data());
        seeded.check(c, 1.f, 1.f, "auto " + what);
        if (HasFatalFailure()) return;
      }
  if (!onednn_sgemm_available()) return;
  // The large problem was timed as a bias problem, apart from the plain GEMM
  // of the same shape.
  const auto with_bias = sgemm_choice_of(false, true, 96, 208, 420, 420, 420, 208, false,
                                         thread_count(), true);
  ASSERT_TRUE(with_bias.has_value());
  EXPECT_TRUE(with_bias->bias);
  EXPECT_FALSE(sgemm_choice_of(false, true, 96, 208, 420, 420, 420, 208, false, thread_count())
                   .has_value());
}

TEST(matmul, other_alpha_beta_run_on_openblas_under_every_policy) {
  PolicyGuard guard;
  const Problem p(true, false, 40, 50, 60, 2, 7);
  for (SgemmPolicy pol : {SgemmPolicy::Auto, SgemmPolicy::OpenBlas, SgemmPolicy::OneDnn}) {
    if (pol == SgemmPolicy::OneDnn && !onednn_sgemm_available()) continue;
    set_sgemm_policy(pol);
    EXPECT_EQ(p.backend(0.5f, 0.25f), SgemmBackend::OpenBlas) << sgemm_policy_name(pol);
    p.check(p.run_sgemm(0.5f, 0.25f), 0.5f, 0.25f, sgemm_policy_name(pol));
  }
  if (onednn_sgemm_available()) {
    EXPECT_THROW(sgemm_with(SgemmBackend::OneDnn, false, false, 2, 2, 2, 2.f, p.a.data(), 2,
                            p.b.data(), 2, 0.f, std::vector<float>(4).data(), 2),
                 Error);
  }
}

TEST(matmul, auto_choice_is_made_once_and_first_use_is_exact) {
  PolicyGuard guard;
  set_sgemm_policy(SgemmPolicy::Auto);
  // 2MNK = 2 * 96 * 208 * 420 = 16.8 MFLOP: just above the timing threshold.
  const Problem p(false, true, 96, 208, 420, 1, 11);
  ASSERT_GE(2.0 * p.M * p.N * p.K, kAutoMinFlop);
  const size_t before = sgemm_choices().size();
  // beta = 1 on first use: the timing runs must not add into the real C.
  const std::vector<float> first = p.run_sgemm(1.f, 1.f);
  p.check(first, 1.f, 1.f, "first use under auto");
  const auto choice = sgemm_choice_of(p.ta, p.tb, p.M, p.N, p.K, p.lda, p.ldb, p.ldc, true,
                                      thread_count());
  if (!onednn_sgemm_available()) {
    EXPECT_FALSE(choice.has_value()) << "without oneDNN there is nothing to choose";
    EXPECT_EQ(sgemm_choices().size(), before);
    return;
  }
  ASSERT_TRUE(choice.has_value());
  EXPECT_EQ(sgemm_choices().size(), before + 1);
  EXPECT_GT(choice->openblas_s, 0);
  EXPECT_GT(choice->onednn_s, 0);
  EXPECT_EQ(choice->backend, choice->onednn_s < choice->openblas_s ? SgemmBackend::OneDnn
                                                                    : SgemmBackend::OpenBlas);
  // The same problem again: same backend, no new timing, the same bits.
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(p.backend(1.f, 1.f), choice->backend);
    const std::vector<float> again = p.run_sgemm(1.f, 1.f);
    ASSERT_EQ(again, first) << "repeat " << r << " of the same problem changed bits";
  }
  EXPECT_EQ(sgemm_choices().size(), before + 1);
  // beta = 0 is another problem (oneDNN builds it without the sum): its own decision.
  p.check(p.run_sgemm(1.f, 0.f), 1.f, 0.f, "beta 0 under auto");
  EXPECT_EQ(sgemm_choices().size(), before + 2);
  EXPECT_NE(sgemm_summary().find("auto"), std::string::npos) << sgemm_summary();
}

TEST(matmul, small_and_nested_calls_stay_on_openblas_under_auto) {
  PolicyGuard guard;
  set_sgemm_policy(SgemmPolicy::Auto);
  const size_t before = sgemm_choices().size();
  const Problem small(false, false, 32, 32, 32, 0, 3);
  EXPECT_EQ(small.backend(1.f, 0.f), SgemmBackend::OpenBlas);
  const Problem big(false, false, 128, 128, 520, 0, 4);
  SgemmBackend inside = SgemmBackend::OneDnn;
#pragma omp parallel num_threads(1)
  inside = big.backend(1.f, 0.f);  // a one-thread team still counts as nested
  EXPECT_EQ(inside, SgemmBackend::OpenBlas);
  EXPECT_EQ(sgemm_choices().size(), before);
}

TEST(matmul, env_forces_a_backend) {
  PolicyGuard guard;
  const Problem p(true, false, 160, 128, 512, 0, 5);  // 21 MFLOP: auto would time it
  setenv("MESHTRAIN_SGEMM", "openblas", 1);
  ASSERT_EQ(sgemm_policy_from_env(), SgemmPolicy::OpenBlas);
  set_sgemm_policy(sgemm_policy_from_env());
  const size_t before = sgemm_choices().size();
  EXPECT_EQ(p.backend(1.f, 1.f), SgemmBackend::OpenBlas);
  p.check(p.run_sgemm(1.f, 1.f), 1.f, 1.f, "MESHTRAIN_SGEMM=openblas");
  EXPECT_EQ(sgemm_choices().size(), before) << "a forced backend times nothing";
  EXPECT_NE(sgemm_summary().find("openblas"), std::string::npos) << sgemm_summary();

  setenv("MESHTRAIN_SGEMM", "onednn", 1);
  if (onednn_sgemm_available()) {
    set_sgemm_policy(sgemm_policy_from_env());
    EXPECT_EQ(p.backend(1.f, 1.f), SgemmBackend::OneDnn);
    p.check(p.run_sgemm(1.f, 1.f), 1.f, 1.f, "MESHTRAIN_SGEMM=onednn");
  } else {
    EXPECT_THROW(sgemm_policy_from_env(), Error);
  }
  setenv("MESHTRAIN_SGEMM", "mkl", 1);
  try {
    sgemm_policy_from_env();
    FAIL() << "MESHTRAIN_SGEMM=mkl accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected auto, openblas or onednn"), std::string::npos)
        << e.what();
  }
}

TEST(matmul, deterministic_runs_pin_auto_to_openblas) {
  PolicyGuard guard;
  set_sgemm_policy(SgemmPolicy::Auto);
  EXPECT_EQ(pin_sgemm_for_determinism(), SgemmPolicy::OpenBlas);
  const Problem p(false, true, 128, 256, 300, 0, 9);
  EXPECT_EQ(p.backend(1.f, 0.f), SgemmBackend::OpenBlas);
  if (onednn_sgemm_available()) {
    EXPECT_NE(sgemm_summary().find("deterministic"), std::string::npos) << sgemm_summary();
    set_sgemm_policy(SgemmPolicy::OneDnn);  // an explicit choice is reproducible: kept
    EXPECT_EQ(pin_sgemm_for_determinism(), SgemmPolicy::OneDnn);
  }
}

// Runs last in this file: it fills the process's budget of timed problems.
TEST(matmul, auto_times_a_bounded_number_of_problems) {
  PolicyGuard guard;
  set_sgemm_policy(SgemmPolicy::Auto);
  if (!onednn_sgemm_available()) GTEST_SKIP() << "nothing to time without oneDNN";
  // Distinct problems just above the FLOP floor: 32 x 512 x (K >= 489).
  std::vector<float> a(32 * 700, 0.5f), b(700 * 512, 0.25f), c(32 * 512);
  int64_t K = 489;
  while (sgemm_choices().size() < kMaxTimedProblems) {
    sgemm(false, false, 32, 512, K, 1.f, a.data(), K, b.data(), 512, 0.f, c.data(), 512);
    ++K;
    ASSERT_LT(K, 700) << "problems were not being timed";
  }
  const std::vector<SgemmChoice> timed = sgemm_choices();
  // A new problem now stays on OpenBLAS, untimed, and stays there.
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(sgemm_backend_for(false, false, 32, 512, K, 1.f, a.data(), K, b.data(), 512, 0.f,
                                c.data(), 512),
              SgemmBackend::OpenBlas);
  }
  EXPECT_EQ(sgemm_choices().size(), kMaxTimedProblems);
  // The problems timed before keep their backends.
  for (const SgemmChoice& ch : timed) {
    if (ch.threads != thread_count()) continue;  // another thread count is another problem
    if (ch.bias) continue;  // an sgemm_bias problem: sgemm_backend_for asks for the plain one
    EXPECT_EQ(sgemm_backend_for(ch.trans_a, ch.trans_b, ch.M, ch.N, ch.K, 1.f, a.data(), ch.lda,
                                b.data(), ch.ldb, ch.accumulate ? 1.f : 0.f, c.data(), ch.ldc),
              ch.backend);
  }
}
