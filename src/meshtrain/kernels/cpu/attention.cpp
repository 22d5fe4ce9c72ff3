#include "meshtrain/kernels/cpu/attention.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "meshtrain/kernels/cpu/matmul.h"
#include "meshtrain/kernels/cpu/vec_math.h"

namespace meshtrain::cpu {

int64_t attention_workspace_floats(int64_t T, int64_t hd) {
  // Q K V O dO dQ dK dV (T x hd each) + probability and dP blocks (Tb x T each).
  return 8 * T * hd + 2 * kAttentionRowBlock * T;
}

namespace {

// Copies head h of component `which` (0=q, 1=k, 2=v) of batch b into dst (T, hd).
void gather_head(float* dst, const float* qkv, int64_t b, int64_t h, int which, int64_t T,
                 int64_t C, int64_t hd) {
  const float* src = qkv + b * T * 3 * C + which * C + h * hd;
  for (int64_t t = 0; t < T; ++t) std::memcpy(dst + t * hd, src + t * 3 * C, sizeof(float) * hd);
}

void gather_rows(float* dst, const float* src, int64_t b, int64_t h, int64_t T, int64_t C,
                 int64_t hd) {
  const float* s = src + b * T * C + h * hd;
  for (int64_t t = 0; t < T; ++t) std::memcpy(dst + t * hd, s + t * C, sizeof(float) * hd);
}

// Turns scaled scores of rows [r0, r1) (columns [0, r1), leading dim T) into
// causal probabilities. With lse_in, uses the saved log-sum-exp; otherwise
// computes it and stores it to lse_out.
void causal_softmax_block(float* P, int64_t r0, int64_t r1, int64_t T, const float* lse_in,
                          float* lse_out) {
  for (int64_t i = r0; i < r1; ++i) {
    float* row = P + (i - r0) * T;
    const int64_t n = i + 1;  // columns 0..i are visible
    float l;
    if (lse_in) {
      l = lse_in[i];
    } else {
      float mx = -INFINITY;
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

void attention_forward(float* out, float* lse, const float* qkv, int64_t B, int64_t T, int64_t C,
                       int64_t NH, float* workspace, int nthreads) {
  const int64_t hd = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const int64_t ws = attention_workspace_floats(T, hd);
#pragma omp parallel for schedule(static) num_threads(nthreads)
  for (int64_t task = 0; task < B * NH; ++task) {
    const int64_t b = task / NH, h = task % NH;
    float* w = workspace + omp_get_thread_num() * ws;
    float *Q = w, *K = Q + T * hd, *V = K + T * hd, *O = V + T * hd;
    float* P = w + 8 * T * hd;
    gather_head(Q, qkv, b, h, 0, T, C, hd);
    gather_head(K, qkv, b, h, 1, T, C, hd);
    gather_head(V, qkv, b, h, 2, T, C, hd);
    float* lse_bh = lse + (b * NH + h) * T;
    for (int64_t r0 = 0; r0 < T; r0 += kAttentionRowBlock) {
      const int64_t r1 = std::min(T, r0 + kAttentionRowBlock), rows = r1 - r0;
      // Scores only for the columns a causal row block can see: [0, r1).
      sgemm(false, true, rows, r1, hd, scale, Q + r0 * hd, hd, K, hd, 0.f, P, T);
      causal_softmax_block(P, r0, r1, T, nullptr, lse_bh);
      sgemm(false, false, rows, hd, r1, 1.f, P, T, V, hd, 0.f, O + r0 * hd, hd);
    }
    float* dst = out + b * T * C + h * hd;
    for (int64_t t = 0; t < T; ++t) std::memcpy(dst + t * C, O + t * hd, sizeof(float) * hd);
  }
}

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                        const float* lse, int64_t B, int64_t T, int64_t C, int64_t NH,
                        float* workspace, int nthreads) {
  const int64_t hd = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const int64_t ws = attention_workspace_floats(T, hd);
#pragma omp parallel for schedule(static) num_threads(nthreads)
  for (int64_t task = 0; task < B * NH; ++task) {
    const int64_t b = task / NH, h = task % NH;
    float* w = workspace + omp_get_thread_num() * ws;
    float *Q = w, *K = Q + T * hd, *V = K + T * hd, *O = V + T * hd;
    float *dO = O + T * hd, *dQ = dO + T * hd, *dK = dQ + T * hd, *dV = dK + T * hd;
    float* P = w + 8 * T * hd;
    float* dP = P + kAttentionRowBlock * T;
    gather_head(Q, qkv, b, h, 0, T, C, hd);
    gather_head(K, qkv, b, h, 1, T, C, hd);
    gather_head(V, qkv, b, h, 2, T, C, hd);
    gather_rows(O, out, b, h, T, C, hd);
    gather_rows(dO, dout, b, h, T, C, hd);
    std::memset(dK, 0, sizeof(float) * T * hd);
    std::memset(dV, 0, sizeof(float) * T * hd);
    const float* lse_bh = lse + (b * NH + h) * T;
    for (int64_t r0 = 0; r0 < T; r0 += kAttentionRowBlock) {
      const int64_t r1 = std::min(T, r0 + kAttentionRowBlock), rows = r1 - r0;
      sgemm(false, true, rows, r1, hd, scale, Q + r0 * hd, hd, K, hd, 0.f, P, T);
      causal_softmax_block(P, r0, r1, T, lse_bh, nullptr);
      // dP = dO V^T; dS = P * (dP - D) with D_i = dO_i . O_i
      sgemm(false, true, rows, r1, hd, 1.f, dO + r0 * hd, hd, V, hd, 0.f, dP, T);
      for (int64_t i = r0; i < r1; ++i) {
        const float* o = O + i * hd;
        const float* g = dO + i * hd;
        float D = 0.f;
        for (int64_t d = 0; d < hd; ++d) D += o[d] * g[d];
        float* dp = dP + (i - r0) * T;
        const float* p = P + (i - r0) * T;
#pragma omp simd
        for (int64_t j = 0; j < r1; ++j) dp[j] = p[j] * (dp[j] - D);
      }
      sgemm(false, false, rows, hd, r1, scale, dP, T, K, hd, 0.f, dQ + r0 * hd, hd);
      sgemm(true, false, r1, hd, rows, scale, dP, T, Q + r0 * hd, hd, 1.f, dK, hd);
      sgemm(true, false, r1, hd, rows, 1.f, P, T, dO + r0 * hd, hd, 1.f, dV, hd);
    }
    float* base = dqkv + b * T * 3 * C + h * hd;
    for (int64_t t = 0; t < T; ++t) {
      std::memcpy(base + t * 3 * C, dQ + t * hd, sizeof(float) * hd);
      std::memcpy(base + t * 3 * C + C, dK + t * hd, sizeof(float) * hd);
      std::memcpy(base + t * 3 * C + 2 * C, dV + t * hd, sizeof(float) * hd);
    }
  }
}

}  // namespace meshtrain::cpu
