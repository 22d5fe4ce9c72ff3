// Which library runs an f32 GEMM: OpenBLAS or oneDNN (sgemm_onednn.h), chosen
// per problem. sgemm() (matmul.h) asks sgemm_backend_for() and runs there.
//
// MESHTRAIN_SGEMM = auto (default) | openblas | onednn.
//   auto: the first time a problem (transposes, M N K, leading dimensions,
//         beta 0/1, thread count) is seen, both backends run it a few times,
//         interleaved, on a scratch copy of C, and the faster (minimum time;
//         the thread's CPU time with one thread, else wall time) keeps it for
//         the rest of the process: the same problem always takes
//         the same backend, so a recomputed forward is bit-identical to the
//         first. Problems below kAutoMinFlop, calls with alpha != 1 or beta
//         other than 0/1, and calls from inside an OpenMP parallel region
//         (attention's per-head products) stay on OpenBLAS.
//   openblas / onednn: every eligible call goes there.
// Without oneDNN in the build auto means openblas. Timings differ between
// processes, so auto can pick differently in two runs; deterministic runs pin
// auto to openblas (pin_sgemm_for_determinism).
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace meshtrain::cpu {

enum class SgemmBackend : uint8_t { OpenBlas, OneDnn };
enum class SgemmPolicy : uint8_t { Auto, OpenBlas, OneDnn };
const char* sgemm_backend_name(SgemmBackend b);  // "openblas" / "onednn"
const char* sgemm_policy_name(SgemmPolicy p);    // "auto" / "openblas" / "onednn"

// Problems with fewer FLOPs (2MNK) are not timed: they stay on OpenBLAS.
constexpr double kAutoMinFlop = 16.0e6;
// At most this many problems are timed per process; problems first seen after
// that stay on OpenBLAS (text generation grows T by one per token: a new
// problem every token, which would otherwise each be timed and get its own
// oneDNN primitive). A training step of the presets has about 15.
constexpr size_t kMaxTimedProblems = 64;

// MESHTRAIN_SGEMM parsed now (clear error for other values; onednn without
// oneDNN in the build is an error too).
SgemmPolicy sgemm_policy_from_env();
// The policy in force: MESHTRAIN_SGEMM at first use unless set since.
SgemmPolicy sgemm_policy();
// Changes the policy for later calls. Decisions auto already made are kept
// (and used again if auto comes back). Set it before the first GEMM of a run.
void set_sgemm_policy(SgemmPolicy p);
// deterministic = true: auto becomes openblas, so a run and its restart (or
// two ranks) compute the same bits; an explicit onednn stays (a fixed choice
// is reproducible too). Returns the policy now in force.
SgemmPolicy pin_sgemm_for_determinism();

// The backend sgemm() uses for this call; under auto this times both
// backends the first time the problem is seen (C is not touched: the timing
// runs write a scratch copy).
SgemmBackend sgemm_backend_for(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                               float alpha, const float* A, int64_t lda, const float* B,
                               int64_t ldb, float beta, const float* C, int64_t ldc);

// Runs the GEMM on the given backend (benchmarks, tests, the peak rate).
// OneDnn needs alpha == 1 and beta 0 or 1 and oneDNN in the build.
void sgemm_with(SgemmBackend b, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                float alpha, const float* A, int64_t lda, const float* B, int64_t ldb, float beta,
                float* C, int64_t ldc);

// sgemm_bias (matmul.h) on the given backend: oneDNN with the bias fused,
// OpenBLAS seeding C with it first. ldc == N.
void sgemm_with_bias(SgemmBackend b, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                     const float* A, int64_t lda, const float* B, int64_t ldb, const float* bias,
                     bool accumulate, float* C);

// One decision auto made, with the times (seconds, minimum of the timed runs)
// it was based on.
struct SgemmChoice {
  bool trans_a, trans_b;
  int64_t M, N, K, lda, ldb, ldc;
  bool accumulate;  // beta == 1
  int threads;
  SgemmBackend backend;
  double openblas_s, onednn_s;
  bool bias;  // an sgemm_bias problem (the times include OpenBLAS's seeding pass)
};
// Every decision so far, in the order the problems were first seen.
std::vector<SgemmChoice> sgemm_choices();
// The decision for a problem, if auto has made one.
std::optional<SgemmChoice> sgemm_choice_of(bool trans_a, bool trans_b, int64_t M, int64_t N,
                                           int64_t K, int64_t lda, int64_t ldb, int64_t ldc,
                                           bool accumulate, int threads, bool bias = false);

// One line for logs and benchmarks, e.g.
//   "sgemm: auto: onednn for 9 of 14 shapes (oneDNN 2.6.3 brg:avx512_core; OpenBLAS otherwise)"
//   "sgemm: openblas (MESHTRAIN_SGEMM=openblas)"
std::string sgemm_summary();

}  // namespace meshtrain::cpu
