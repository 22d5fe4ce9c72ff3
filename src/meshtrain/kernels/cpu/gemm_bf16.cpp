#include "meshtrain/kernels/cpu/gemm_bf16.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string_view>
#include <tuple>

#include "meshtrain/core/cpu_isa.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/half.h"
#include "meshtrain/core/tensor.h"
#include "meshtrain/kernels/cpu/sgemm_backend.h"

#include "meshtrain/kernels/cpu/onednn_matmul.h"

namespace meshtrain::cpu {

const char* half_name(Half h) { return h == Half::BF16 ? "bf16" : "f16"; }

bool cpu_has_avx512_bf16() { return active_isa() >= Isa::Avx512Bf16; }

bool have_onednn() {
#if defined(MESHTRAIN_HAVE_DNNL)
  return true;
#else
  return false;
#endif
}

namespace {

HalfGemmPath default_path() {
  const char* env = std::getenv("MESHTRAIN_BF16_GEMM");
  const std::string_view want = env ? env : "auto";
  MT_CHECK(want == "auto" || want == "fallback" || want == "onednn",
           "MESHTRAIN_BF16_GEMM = \"{}\": expected auto, onednn or fallback", want);
  if (want == "fallback" || !have_onednn() || !cpu_has_avx512_bf16())
    return HalfGemmPath::FallbackSgemm;
  return HalfGemmPath::OneDnnBf16;
}

std::atomic<int> g_path{-1};  // -1: not decided yet

// ---- fallback: widen the operands to f32, then sgemm ----------------------

// A per-thread f32 scratch that grows on demand (tagged as workspace).
float* scratch(int which, int64_t n) {
  thread_local Tensor bufs[2];
  Tensor& t = bufs[which];
  if (t.numel() < n) {
    t = Tensor();  // free first: the peak holds one buffer, as predicted
    t = Tensor::zeros({n}, DType::F32, MemCategory::Workspace);
  }
  return t.data<float>();
}

// Widens the stored rows x cols block (leading dimension ld) into dst with
// leading dimension cols.
void widen(Half fmt, const uint16_t* src, int64_t rows, int64_t cols, int64_t ld, float* dst) {
#pragma omp parallel for schedule(static) if (rows * cols >= (1 << 16))
  for (int64_t r = 0; r < rows; ++r) {
    if (fmt == Half::BF16)
      bf16_to_f32(src + r * ld, dst + r * cols, static_cast<size_t>(cols));
    else
      f16_to_f32(src + r * ld, dst + r * cols, static_cast<size_t>(cols));
  }
}

void gemm_widened(Half fmt, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                  const uint16_t* A, int64_t lda, const uint16_t* B, int64_t ldb, float beta,
                  float* C, int64_t ldc) {
  // Stored shapes: A is (M, K), or (K, M) when transposed; B likewise.
  const int64_t a_rows = ta ? K : M, a_cols = ta ? M : K;
  const int64_t b_rows = tb ? N : K, b_cols = tb ? K : N;
  float* a = scratch(0, a_rows * a_cols);
  float* b = scratch(1, b_rows * b_cols);
  widen(fmt, A, a_rows, a_cols, lda, a);
  widen(fmt, B, b_rows, b_cols, ldb, b);
  // Always OpenBLAS: an automatic (timed) choice could differ between the
  // processes of a run, and the 16-bit paths promise reproducible bits.
  sgemm_with(SgemmBackend::OpenBlas, ta, tb, M, N, K, alpha, a, a_cols, b, b_cols, beta, C, ldc);
}

// ---- oneDNN matmul ----------------------------------------------------------
#if defined(MESHTRAIN_HAVE_DNNL)

// One primitive per distinct problem; a training step uses a handful.
struct Problem {
  bool ta, tb;
  int64_t M, N, K, lda, ldb, ldc;
  bool accumulate;  // beta == 1 (sum post-op) vs beta == 0
  auto key() const { return std::tie(ta, tb, M, N, K, lda, ldb, ldc, accumulate); }
  bool operator<(const Problem& o) const { return key() < o.key(); }
};

struct OneDnn {
  std::mutex mu;
  std::map<Problem, OneDnnMatmul> cache;
  std::string impl;  // implementation name of the first primitive made

  const OneDnnMatmul& get(const Problem& p) {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(p);
    if (it != cache.end()) return it->second;
    OneDnnMatmul m = make_onednn_matmul(dnnl::memory::data_type::bf16, p.ta, p.tb, p.M, p.N, p.K,
                                        p.lda, p.ldb, p.ldc, p.accumulate);
    if (impl.empty()) impl = m.impl;
    return cache.emplace(p, std::move(m)).first->second;  // std::map: references stay valid
  }

  // The implementation oneDNN picked (e.g. "brg:avx512_core_bf16"); makes a
  // small primitive first if none exists yet.
  std::string impl_name() {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!impl.empty()) return impl;
    }
    get(Problem{false, true, 64, 64, 64, 64, 64, 64, false});
    std::lock_guard<std::mutex> lock(mu);
    return impl;
  }

  void run(const Problem& p, const uint16_t* A, const uint16_t* B, float* C) {
    run_onednn_matmul(get(p), A, B, C);
  }
};

OneDnn& onednn() {
  static OneDnn* o = new OneDnn();  // never destroyed: usable from exit-time code
  return *o;
}
#endif

}  // namespace

HalfGemmPath bf16_gemm_path() {
  int p = g_path.load(std::memory_order_relaxed);
  if (p < 0) {
    p = static_cast<int>(default_path());
    g_path.store(p, std::memory_order_relaxed);
  }
  return static_cast<HalfGemmPath>(p);
}

void set_bf16_gemm_path(HalfGemmPath p) {
  MT_CHECK(p == HalfGemmPath::FallbackSgemm || (have_onednn() && cpu_has_avx512_bf16()),
           "the oneDNN bf16 GEMM needs oneDNN in the build and a CPU with AVX512_BF16 "
           "(oneDNN built in: {}, AVX512_BF16: {})", have_onednn(), cpu_has_avx512_bf16());
  g_path.store(static_cast<int>(p), std::memory_order_relaxed);
}

std::string half_gemm_description(Half fmt) {
  if (fmt == Half::F16)
    return "f16 GEMM: fallback: fp32 sgemm after conversion (no f16 dot-product instruction "
           "on this CPU)";
  if (bf16_gemm_path() == HalfGemmPath::FallbackSgemm) {
    // The user's explicit choice first: it is the reason whatever the CPU.
    const char* env = std::getenv("MESHTRAIN_BF16_GEMM");
    const char* why = env && std::string_view(env) == "fallback" ? "MESHTRAIN_BF16_GEMM=fallback"
                      : !have_onednn()                             ? "built without oneDNN"
                      : !cpu_has_avx512_bf16()
                          ? (isa_capped() ? "MESHTRAIN_ISA is below avx512bf16" : "CPU lacks AVX512_BF16")
                          : "set_bf16_gemm_path(fallback)";
    return fmt::format("fallback: fp32 sgemm ({})", why);
  }
#if defined(MESHTRAIN_HAVE_DNNL)
  const dnnl_version_t* v = dnnl_version();
  return fmt::format("bf16 GEMM: oneDNN {}.{}.{} {} avx512_bf16", v->major, v->minor, v->patch,
                     onednn().impl_name());
#else
  return "fallback: fp32 sgemm";
#endif
}

void gemm_half(Half fmt, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const uint16_t* A, int64_t lda, const uint16_t* B, int64_t ldb, float beta,
               float* C, int64_t ldc) {
  MT_CHECK(M >= 0 && N >= 0 && K >= 0, "gemm_half: negative shape ({}, {}, {})", M, N, K);
  MT_CHECK(lda >= std::max<int64_t>(1, trans_a ? M : K) && ldb >= std::max<int64_t>(1, trans_b ? K : N) &&
               ldc >= std::max<int64_t>(1, N),
           "gemm_half: leading dimensions lda {} ldb {} ldc {} too small for M {} N {} K {}", lda,
           ldb, ldc, M, N, K);
  if (M == 0 || N == 0) return;
  if (K == 0) {  // no products: C = beta * C
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0.f ? 0.f : beta * C[i * ldc + j];
    return;
  }
#if defined(MESHTRAIN_HAVE_DNNL)
  if (fmt == Half::BF16 && bf16_gemm_path() == HalfGemmPath::OneDnnBf16 && alpha == 1.0f &&
      (beta == 0.0f || beta == 1.0f)) {
    onednn().run(Problem{trans_a, trans_b, M, N, K, lda, ldb, ldc, beta == 1.0f}, A, B, C);
    return;
  }
#endif
  gemm_widened(fmt, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace meshtrain::cpu
