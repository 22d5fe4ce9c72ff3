#include "meshtrain/kernels/cpu/sgemm_backend.h"

#include <cblas.h>
#include <fmt/format.h>
#include <omp.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string_view>
#include <tuple>

#include "meshtrain/core/error.h"
#include "meshtrain/kernels/cpu/matmul.h"
#include "meshtrain/kernels/cpu/sgemm_onednn.h"

namespace meshtrain::cpu {

const char* sgemm_backend_name(SgemmBackend b) {
  return b == SgemmBackend::OneDnn ? "onednn" : "openblas";
}

const char* sgemm_policy_name(SgemmPolicy p) {
  switch (p) {
    case SgemmPolicy::Auto: return "auto";
    case SgemmPolicy::OpenBlas: return "openblas";
    case SgemmPolicy::OneDnn: return "onednn";
  }
  return "?";
}

namespace {

// Timed runs per backend, after one untimed run of each; large problems
// (an untimed run over kLongRunS) get fewer, so timing stays a small part of
// a big model's first step.
constexpr int kTimedRuns = 5;
constexpr int kTimedRunsLong = 2;
constexpr double kLongRunS = 0.05;

std::atomic<int> g_policy{-1};  // -1: not read from the environment yet
std::atomic<bool> g_pinned{false};  // pin_sgemm_for_determinism turned auto into openblas

struct Key {
  bool ta, tb;
  int64_t M, N, K, lda, ldb, ldc;
  bool accumulate;
  int threads;
  bool bias;  // sgemm_bias: OpenBLAS timed with its seeding pass, oneDNN with its fused bias
  auto tie() const { return std::tie(ta, tb, M, N, K, lda, ldb, ldc, accumulate, threads, bias); }
  bool operator<(const Key& o) const { return tie() < o.tie(); }
};

struct Decisions {
  std::mutex mu;
  std::map<Key, SgemmChoice> by_key;
  std::vector<Key> order;  // first-seen order, for reports
};

Decisions& decisions() {
  static Decisions* d = new Decisions();  // never destroyed: usable from exit-time code
  return *d;
}

void sgemm_openblas(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                    const float* A, int64_t lda, const float* B, int64_t ldb, float beta,
                    float* C, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<blasint>(M), static_cast<blasint>(N), static_cast<blasint>(K), alpha, A,
              static_cast<blasint>(lda), B, static_cast<blasint>(ldb), beta, C,
              static_cast<blasint>(ldc));
}

bool onednn_can_run(float alpha, float beta, int64_t K) {
  return onednn_sgemm_available() && alpha == 1.0f && (beta == 0.0f || beta == 1.0f) && K > 0;
}

// Times both backends on the caller's operands, writing a scratch copy of C
// (beta = 1 reads it; the real C must be updated exactly once, afterwards).
// With a bias each OpenBLAS run includes seeding the scratch with it.
SgemmChoice time_both(const Key& k, const float* A, const float* B, const float* C,
                      const float* bias) {
  const size_t c_elems = static_cast<size_t>((k.M - 1) * k.ldc + k.N);
  std::unique_ptr<float[]> scratch(new float[c_elems]);
  if (k.accumulate) std::memcpy(scratch.get(), C, sizeof(float) * c_elems);
  const float beta = k.accumulate ? 1.0f : 0.0f;
  // With one thread both backends run on this thread, and its CPU time leaves
  // out the time other jobs held the core (a busy machine otherwise decides
  // by noise); with more, wall time (the workers' time is not this thread's).
  const bool thread_clock = k.threads == 1;
  auto now = [thread_clock] {
    if (thread_clock) {
      timespec ts;
      clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
      return ts.tv_sec + ts.tv_nsec * 1e-9;
    }
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  };
  auto run = [&](SgemmBackend b) {
    const double t0 = now();
    if (k.bias)
      sgemm_with_bias(b, k.ta, k.tb, k.M, k.N, k.K, A, k.lda, B, k.ldb, bias, k.accumulate,
                      scratch.get());
    else
      sgemm_with(b, k.ta, k.tb, k.M, k.N, k.K, 1.0f, A, k.lda, B, k.ldb, beta, scratch.get(),
                 k.ldc);
    return now() - t0;
  };
  // Untimed: oneDNN generates its kernel, OpenBLAS sizes its buffers, pages fault in.
  const double first = std::max(run(SgemmBackend::OpenBlas), run(SgemmBackend::OneDnn));
  const int timed = first > kLongRunS ? kTimedRunsLong : kTimedRuns;
  double blas = std::numeric_limits<double>::infinity(), dnn = blas;
  for (int r = 0; r < timed; ++r) {  // interleaved, alternating which goes first
    if (r % 2 == 0) {
      blas = std::min(blas, run(SgemmBackend::OpenBlas));
      dnn = std::min(dnn, run(SgemmBackend::OneDnn));
    } else {
      dnn = std::min(dnn, run(SgemmBackend::OneDnn));
      blas = std::min(blas, run(SgemmBackend::OpenBlas));
    }
  }
  const SgemmBackend faster = dnn < blas ? SgemmBackend::OneDnn : SgemmBackend::OpenBlas;
  return SgemmChoice{k.ta, k.tb, k.M, k.N, k.K, k.lda, k.ldb, k.ldc, k.accumulate,
                     k.threads, faster, blas, dnn, k.bias};
}

SgemmBackend decide(const Key& k, const float* A, const float* B, const float* C,
                    const float* bias) {
  Decisions& d = decisions();
  std::lock_guard<std::mutex> lock(d.mu);  // one timing at a time; later callers reuse it
  auto it = d.by_key.find(k);
  if (it != d.by_key.end()) return it->second.backend;
  if (d.by_key.size() >= kMaxTimedProblems) return SgemmBackend::OpenBlas;  // for good: the map no longer grows
  const SgemmChoice c = time_both(k, A, B, C, bias);
  d.by_key.emplace(k, c);
  d.order.push_back(k);
  return c.backend;
}

}  // namespace

SgemmPolicy sgemm_policy_from_env() {
  const char* env = std::getenv("MESHTRAIN_SGEMM");
  const std::string_view want = env ? env : "auto";
  if (want == "auto") return SgemmPolicy::Auto;
  if (want == "openblas") return SgemmPolicy::OpenBlas;
  MT_CHECK(want == "onednn", "MESHTRAIN_SGEMM = \"{}\": expected auto, openblas or onednn", want);
  MT_CHECK(onednn_sgemm_available(),
           "MESHTRAIN_SGEMM = onednn, but this build has no oneDNN (install libdnnl-dev and "
           "reconfigure, or use auto/openblas)");
  return SgemmPolicy::OneDnn;
}

SgemmPolicy sgemm_policy() {
  int p = g_policy.load(std::memory_order_relaxed);
  if (p < 0) {
    p = static_cast<int>(sgemm_policy_from_env());
    int expected = -1;  // a concurrent set_sgemm_policy wins
    if (!g_policy.compare_exchange_strong(expected, p)) p = expected;
  }
  return static_cast<SgemmPolicy>(p);
}

void set_sgemm_policy(SgemmPolicy p) {
  MT_CHECK(p != SgemmPolicy::OneDnn || onednn_sgemm_available(),
           "sgemm backend onednn requested, but this build has no oneDNN");
  g_policy.store(static_cast<int>(p), std::memory_order_relaxed);
  g_pinned.store(false, std::memory_order_relaxed);
}

SgemmPolicy pin_sgemm_for_determinism() {
  if (sgemm_policy() == SgemmPolicy::Auto) {
    set_sgemm_policy(SgemmPolicy::OpenBlas);
    g_pinned.store(true, std::memory_order_relaxed);
  }
  return sgemm_policy();
}

namespace {

// sgemm_backend_for, with the bias of sgemm_bias (nullptr: none) part of the problem.
SgemmBackend backend_for(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                         const float* A, int64_t lda, const float* B, int64_t ldb, float beta,
                         const float* C, int64_t ldc, const float* bias) {
  if (M <= 0 || N <= 0 || !onednn_can_run(alpha, beta, K)) return SgemmBackend::OpenBlas;
  switch (sgemm_policy()) {
    case SgemmPolicy::OpenBlas: return SgemmBackend::OpenBlas;
    case SgemmPolicy::OneDnn: return SgemmBackend::OneDnn;
    case SgemmPolicy::Auto: break;
  }
  // Inside a parallel region (even a one-thread team) other threads run their
  // own GEMMs: no clean timing, and these small products suit OpenBLAS.
  if (omp_get_level() > 0 || 2.0 * M * N * K < kAutoMinFlop) return SgemmBackend::OpenBlas;
  return decide(
      Key{ta, tb, M, N, K, lda, ldb, ldc, beta == 1.0f, omp_get_max_threads(), bias != nullptr}, A,
      B, C, bias);
}

}  // namespace

SgemmBackend sgemm_backend_for(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                               const float* A, int64_t lda, const float* B, int64_t ldb,
                               float beta, const float* C, int64_t ldc) {
  return backend_for(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, nullptr);
}

void sgemm_with(SgemmBackend b, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
                int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  if (b == SgemmBackend::OneDnn) {
    MT_CHECK(onednn_can_run(alpha, beta, K),
             "sgemm on onednn: needs oneDNN in the build, alpha 1 (got {}), beta 0 or 1 (got {}) "
             "and K >= 1 (got {})", alpha, beta, K);
    sgemm_onednn(ta, tb, M, N, K, A, lda, B, ldb, beta == 1.0f, C, ldc);
    return;
  }
  sgemm_openblas(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
           const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* Cm,
           int64_t ldc) {
  if (M == 0 || N == 0) return;
  if (M == 1 && !trans_a && K > 0) {
    // One row (token-by-token generation): a matrix-vector product reads the
    // weights once; a GEMM would first pack (copy) them on every call.
    if (trans_b)
      cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<blasint>(N), static_cast<blasint>(K),
                  alpha, B, static_cast<blasint>(ldb), A, 1, beta, Cm, 1);
    else
      cblas_sgemv(CblasRowMajor, CblasTrans, static_cast<blasint>(K), static_cast<blasint>(N),
                  alpha, B, static_cast<blasint>(ldb), A, 1, beta, Cm, 1);
    return;
  }
  const SgemmBackend b =
      sgemm_backend_for(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, Cm, ldc);
  sgemm_with(b, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, Cm, ldc);
}

void sgemm_with_bias(SgemmBackend b, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                     const float* A, int64_t lda, const float* B, int64_t ldb, const float* bias,
                     bool accumulate, float* C) {
  if (M <= 0 || N <= 0) return;
  MT_CHECK(bias, "sgemm_with_bias: no bias (use sgemm_with)");
  if (b == SgemmBackend::OneDnn) {
    MT_CHECK(onednn_can_run(1.0f, 0.0f, K),
             "sgemm on onednn: needs oneDNN in the build and K >= 1 (got {})", K);
    sgemm_onednn(ta, tb, M, N, K, A, lda, B, ldb, accumulate, C, N, bias);
    return;
  }
  const float beta = seed_output_with_bias(C, bias, M, N, accumulate);
  sgemm_openblas(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, beta, C, N);
}

void sgemm_bias(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float* A,
                int64_t lda, const float* B, int64_t ldb, const float* bias, bool accumulate,
                float* C) {
  if (M == 0 || N == 0) return;
  if (M == 1 && !trans_a) {  // one row: sgemm's matrix-vector path after seeding
    const float beta = seed_output_with_bias(C, bias, M, N, accumulate);
    sgemm(trans_a, trans_b, M, N, K, 1.0f, A, lda, B, ldb, beta, C, N);
    return;
  }
  const SgemmBackend b = backend_for(trans_a, trans_b, M, N, K, 1.0f, A, lda, B, ldb,
                                     accumulate ? 1.0f : 0.0f, C, N, bias);
  sgemm_with_bias(b, trans_a, trans_b, M, N, K, A, lda, B, ldb, bias, accumulate, C);
}

std::vector<SgemmChoice> sgemm_choices() {
  Decisions& d = decisions();
  std::lock_guard<std::mutex> lock(d.mu);
  std::vector<SgemmChoice> out;
  for (const Key& k : d.order) out.push_back(d.by_key.at(k));
  return out;
}

std::optional<SgemmChoice> sgemm_choice_of(bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                                           int64_t lda, int64_t ldb, int64_t ldc,
                                           bool accumulate, int threads, bool bias) {
  Decisions& d = decisions();
  std::lock_guard<std::mutex> lock(d.mu);
  auto it = d.by_key.find(Key{ta, tb, M, N, K, lda, ldb, ldc, accumulate, threads, bias});
  if (it == d.by_key.end()) return std::nullopt;
  return it->second;
}

std::string sgemm_summary() {
  if (!onednn_sgemm_available()) return "sgemm: openblas (built without oneDNN)";
  const SgemmPolicy p = sgemm_policy();
  if (p == SgemmPolicy::OpenBlas)
    return g_pinned.load() ? "sgemm: openblas (deterministic run: auto pinned to openblas)"
                           : "sgemm: openblas (MESHTRAIN_SGEMM=openblas)";
  if (p == SgemmPolicy::OneDnn)
    return fmt::format("sgemm: onednn for every call with alpha 1, beta 0/1 ({}; "
                       "MESHTRAIN_SGEMM=onednn)", onednn_sgemm_description());
  const std::vector<SgemmChoice> cs = sgemm_choices();
  const auto dnn = std::count_if(cs.begin(), cs.end(), [](const SgemmChoice& c) {
    return c.backend == SgemmBackend::OneDnn;
  });
  return fmt::format("sgemm: auto: onednn for {} of {} timed shapes ({}; openblas otherwise)",
                     dnn, cs.size(), onednn_sgemm_description());
}

}  // namespace meshtrain::cpu
