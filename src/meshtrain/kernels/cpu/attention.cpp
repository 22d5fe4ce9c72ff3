// isa-levels: scalar avx2 avx512
#include "meshtrain/kernels/cpu/attention.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "meshtrain/core/error.h"
#include "meshtrain/core/isa_dispatch.h"
#include "meshtrain/kernels/cpu/attention_fused.h"
#include "meshtrain/kernels/cpu/matmul.h"
#include "meshtrain/kernels/cpu/vec_math.h"

namespace meshtrain::cpu::MT_ISA_NS {


namespace {

// Turns scaled scores of rows [r0, r1) (row i at P + (i - r0) * ldp, columns
// [0, r1)) into causal probabilities. With lse_in, uses the saved
// log-sum-exp; otherwise computes it and stores it to lse_out.
void causal_softmax_block(float* P, int64_t ldp, int64_t r0, int64_t r1, const float* lse_in,
                          float* lse_out) {
  for (int64_t i = r0; i < r1; ++i) {
    float* row = P + (i - r0) * ldp;
    const int64_t n = i + 1;  // columns 0..i are visible
    float l;
    if (lse_in) {
      l = lse_in[i];
    } else {
      float mx = -INFINITY;  // a max is exact in any order: vectorized
#pragma omp simd reduction(max : mx)
      for (int64_t j = 0; j < n; ++j) mx = row[j] > mx ? row[j] : mx;
      float s = 0.f;
#pragma omp simd reduction(+ : s)
      for (int64_t j = 0; j < n; ++j) s += fast_expf(row[j] - mx);
      l = mx + std::log(s);
      lse_out[i] = l;
    }
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) row[j] = fast_expf(row[j] - l);
    for (int64_t j = n; j < r1; ++j) row[j] = 0.f;
  }
}

}  // namespace

void attention_forward_gemm(float* out, float* lse, const float* qkv, int64_t B, int64_t T, int64_t C,
                       int64_t NH, float* workspace, int nthreads) {
  const int64_t hd = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const int64_t ws = attention_workspace_floats(T, hd);
#pragma omp parallel for schedule(static) num_threads(nthreads)
  for (int64_t task = 0; task < B * NH; ++task) {
    const int64_t b = task / NH, h = task % NH;
    float* P = workspace + omp_get_thread_num() * ws;
    // Head h's q, k, v rows straight from qkv (row stride 3C); its output
    // rows straight into out (stride C): the GEMMs pack them anyway.
    const int64_t ld = 3 * C;
    const float* Q = qkv + b * T * ld + h * hd;
    const float *K = Q + C, *V = Q + 2 * C;
    float* O = out + b * T * C + h * hd;
    float* lse_bh = lse + (b * NH + h) * T;
    for (int64_t r0 = 0; r0 < T; r0 += kAttentionRowBlock) {
      const int64_t r1 = std::min(T, r0 + kAttentionRowBlock), rows = r1 - r0;
      // Scores only for the columns a causal row block can see: [0, r1).
      sgemm(false, true, rows, r1, hd, scale, Q + r0 * ld, ld, K, ld, 0.f, P, T);
      causal_softmax_block(P, T, r0, r1, nullptr, lse_bh);
      sgemm(false, false, rows, hd, r1, 1.f, P, T, V, ld, 0.f, O + r0 * C, C);
    }
  }
}

void attention_backward_gemm(float* dqkv, const float* dout, const float* qkv, const float* out,
                             const float* lse, int64_t B, int64_t T, int64_t C, int64_t NH,
                             float* workspace, int nthreads) {
  const int64_t hd = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const int64_t ws = attention_workspace_floats(T, hd);
#pragma omp parallel for schedule(static) num_threads(nthreads)
  for (int64_t task = 0; task < B * NH; ++task) {
    const int64_t b = task / NH, h = task % NH;
    float* P = workspace + omp_get_thread_num() * ws;
    float* dP = P + kAttentionRowBlock * T;
    // Operands and results in place, as in the forward: q, k, v and their
    // gradients with row stride 3C, out and dout with stride C.
    const int64_t ld = 3 * C;
    const float* Q = qkv + b * T * ld + h * hd;
    const float *K = Q + C, *V = Q + 2 * C;
    const float* O = out + b * T * C + h * hd;
    const float* dO = dout + b * T * C + h * hd;
    float* dQ = dqkv + b * T * ld + h * hd;
    float *dK = dQ + C, *dV = dQ + 2 * C;
    for (int64_t t = 0; t < T; ++t) {  // dK, dV accumulate over row blocks
      std::memset(dK + t * ld, 0, sizeof(float) * hd);
      std::memset(dV + t * ld, 0, sizeof(float) * hd);
    }
    const float* lse_bh = lse + (b * NH + h) * T;
    for (int64_t r0 = 0; r0 < T; r0 += kAttentionRowBlock) {
      const int64_t r1 = std::min(T, r0 + kAttentionRowBlock), rows = r1 - r0;
      sgemm(false, true, rows, r1, hd, scale, Q + r0 * ld, ld, K, ld, 0.f, P, T);
      causal_softmax_block(P, T, r0, r1, lse_bh, nullptr);
      // dP = dO V^T; dS = P * (dP - D) with D_i = dO_i . O_i
      sgemm(false, true, rows, r1, hd, 1.f, dO + r0 * C, C, V, ld, 0.f, dP, T);
      for (int64_t i = r0; i < r1; ++i) {
        const float* o = O + i * C;
        const float* g = dO + i * C;
        float D = 0.f;
#pragma omp simd reduction(+ : D)
        for (int64_t d = 0; d < hd; ++d) D += o[d] * g[d];
        float* dp = dP + (i - r0) * T;
        const float* p = P + (i - r0) * T;
#pragma omp simd
        for (int64_t j = 0; j < r1; ++j) dp[j] = p[j] * (dp[j] - D);
      }
      sgemm(false, false, rows, hd, r1, scale, dP, T, K, ld, 0.f, dQ + r0 * ld, ld);
      sgemm(true, false, r1, hd, rows, scale, dP, T, Q + r0 * ld, ld, 1.f, dK, ld);
      sgemm(true, false, r1, hd, rows, 1.f, P, T, dO + r0 * C, C, 1.f, dV, ld);
    }
  }
}

}  // namespace meshtrain::cpu::MT_ISA_NS

#if MT_ISA_BASELINE
namespace meshtrain::cpu {

int64_t attention_fused_workspace_floats(int64_t T, int64_t hd) {
  // P and dP blocks (Tb x Tp), the packed K and V panels (hd x Tp) and the
  // backward's contiguous K, Q and dO rows (Tp x hd each; the forward's V
  // uses the first).
  const int64_t Tp = (T + kAttentionPanel - 1) / kAttentionPanel * kAttentionPanel;
  return 2 * kAttentionRowBlock * Tp + 5 * hd * Tp;
}

int64_t attention_workspace_floats(int64_t T, int64_t hd) {
  // The same size whichever path runs, so the memory prediction does not
  // depend on the CPU: the fused path's need, which covers the GEMM path's
  // two Tb x T blocks.
  return std::max(2 * kAttentionRowBlock * T, attention_fused_workspace_floats(T, hd));
}

using AttentionForward = void (*)(float*, float*, const float*, int64_t, int64_t, int64_t, int64_t,
                                  float*, int);
using AttentionBackward = void (*)(float*, const float*, const float*, const float*, const float*,
                                   int64_t, int64_t, int64_t, int64_t, float*, int);

MT_ISA_DECLARE(void attention_forward_gemm(float* out, float* lse, const float* qkv, int64_t B, int64_t T, int64_t C, int64_t NH, float* workspace, int nthreads))
MT_ISA_DECLARE(void attention_backward_gemm(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse, int64_t B, int64_t T, int64_t C, int64_t NH, float* workspace, int nthreads))
#if MESHTRAIN_ISA_VARIANTS
// The fused kernels: attention_fused.cpp (avx512), attention_fused_avx2.cpp (avx2).
#define MT_DECLARE_FUSED(ns)                                                                     \
  namespace ns {                                                                                 \
  void attention_forward_fused(float* out, float* lse, const float* qkv, int64_t B, int64_t T,   \
                               int64_t C, int64_t NH, float* workspace, int nthreads);           \
  void attention_backward_fused(float* dqkv, const float* dout, const float* qkv,                \
                                const float* out, const float* lse, int64_t B, int64_t T,        \
                                int64_t C, int64_t NH, float* workspace, int nthreads);          \
  }
MT_DECLARE_FUSED(isa_avx512)
MT_DECLARE_FUSED(isa_avx2)
#undef MT_DECLARE_FUSED
#endif

namespace {
// The fused kernels for the active level; null where there are none.
struct FusedKernels {
  AttentionForward forward = nullptr;
  AttentionBackward backward = nullptr;
  const char* name = "gemm";
};

FusedKernels fused_kernels() {
#if MESHTRAIN_ISA_VARIANTS
  if (active_isa() >= Isa::Avx512)
    return {isa_avx512::attention_forward_fused, isa_avx512::attention_backward_fused, "fused avx512"};
  if (active_isa() >= Isa::Avx2)
    return {isa_avx2::attention_forward_fused, isa_avx2::attention_backward_fused, "fused avx2"};
#endif
  return {};
}
}  // namespace

bool attention_fused_available() { return fused_kernels().forward != nullptr; }

const char* attention_path() { return fused_kernels().name; }

void attention_forward_fused(float* out, float* lse, const float* qkv, int64_t B, int64_t T,
                             int64_t C, int64_t NH, float* workspace, int nthreads) {
  const FusedKernels k = fused_kernels();
  MT_CHECK(k.forward, "attention_forward_fused: no fused kernel at ISA level {}",
           isa_name(active_isa()));
  k.forward(out, lse, qkv, B, T, C, NH, workspace, nthreads);
}

void attention_backward_fused(float* dqkv, const float* dout, const float* qkv, const float* out,
                              const float* lse, int64_t B, int64_t T, int64_t C, int64_t NH,
                              float* workspace, int nthreads) {
  const FusedKernels k = fused_kernels();
  MT_CHECK(k.backward, "attention_backward_fused: no fused kernel at ISA level {}",
           isa_name(active_isa()));
  k.backward(dqkv, dout, qkv, out, lse, B, T, C, NH, workspace, nthreads);
}

void attention_forward_gemm(float* out, float* lse, const float* qkv, int64_t B, int64_t T,
                            int64_t C, int64_t NH, float* workspace, int nthreads) {
  MT_ISA_PICK(attention_forward_gemm)(out, lse, qkv, B, T, C, NH, workspace, nthreads);
}

void attention_backward_gemm(float* dqkv, const float* dout, const float* qkv, const float* out,
                             const float* lse, int64_t B, int64_t T, int64_t C, int64_t NH,
                             float* workspace, int nthreads) {
  MT_ISA_PICK(attention_backward_gemm)(dqkv, dout, qkv, out, lse, B, T, C, NH, workspace, nthreads);
}

void attention_forward(float* out, float* lse, const float* qkv, int64_t B, int64_t T, int64_t C,
                       int64_t NH, float* workspace, int nthreads) {
  MT_CHECK(NH > 0 && C % NH == 0, "attention: {} channels do not split into {} heads", C, NH);
  if (const FusedKernels k = fused_kernels(); k.forward)
    k.forward(out, lse, qkv, B, T, C, NH, workspace, nthreads);
  else
    attention_forward_gemm(out, lse, qkv, B, T, C, NH, workspace, nthreads);
}

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                        const float* lse, int64_t B, int64_t T, int64_t C, int64_t NH,
                        float* workspace, int nthreads) {
  auto overlaps = [&](const float* p, int64_t n) {
    return dqkv < p + n && p < dqkv + B * T * 3 * C;
  };
  MT_CHECK(NH > 0 && C % NH == 0, "attention: {} channels do not split into {} heads", C, NH);
  MT_CHECK(!overlaps(qkv, B * T * 3 * C) && !overlaps(out, B * T * C) && !overlaps(dout, B * T * C),
           "attention_backward: dqkv overlaps qkv, out or dout (they are read while it is written)");
  if (const FusedKernels k = fused_kernels(); k.backward)
    k.backward(dqkv, dout, qkv, out, lse, B, T, C, NH, workspace, nthreads);
  else
    attention_backward_gemm(dqkv, dout, qkv, out, lse, B, T, C, NH, workspace, nthreads);
}

}  // namespace meshtrain::cpu
#endif
