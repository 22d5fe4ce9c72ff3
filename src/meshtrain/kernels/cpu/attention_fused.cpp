// isa-levels: avx512
#include "meshtrain/kernels/cpu/attention_fused.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "meshtrain/core/error.h"
#include "meshtrain/kernels/cpu/attention.h"

#if defined(__AVX512F__)
// GCC 12 warns inside its own AVX-512 headers (_mm512_undefined_ps in the
// unpack/shuffle/min/max/roundscale/scalef wrappers) once inlined here: a false
// positive, silenced for this file.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#endif

namespace meshtrain::cpu::MT_ISA_NS {

#if defined(__AVX512F__)

namespace {

// Score columns per packed panel: two 16-float vectors.
constexpr int64_t kPanel = kAttentionPanel;
int64_t padded_length(int64_t T) { return (T + kPanel - 1) / kPanel * kPanel; }

// Rows of every tile: score tiles and product tiles share the same 8-row
// grid, so a product never reads a score column its row's tile left unwritten.
constexpr int kTileRows = 8;
static_assert(kAttentionRowBlock % kTileRows == 0);

// exp(x) per lane, the same range reduction and polynomial as fast_expf.
inline __m512 exp16(__m512 x) {
  // Clamp with x as the second operand: AVX-512 min/max return the second
  // operand when either is NaN, so a NaN score stays NaN (and shows up in
  // the loss) instead of becoming e^88.
  x = _mm512_max_ps(_mm512_set1_ps(-87.0f), _mm512_min_ps(_mm512_set1_ps(88.0f), x));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187045e-06f), r);
  __m512 p = _mm512_set1_ps(1.0f / 720.0f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);  // p * 2^n
}

// Lanes at columns col0 .. col0+15 that a causal row i may see (col <= i).
inline __mmask16 visible(int64_t col0, int64_t i) {
  const int64_t n = i - col0 + 1;
  return n >= 16 ? __mmask16(0xFFFF) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1u);
}

// Transposes the 16 x 16 block held in r[0..15] (row c in r[c]) in place.
inline void transpose16x16(__m512 r[16]) {
  __m512 t[16];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {  // per 128-bit lane: [a0 b0 a1 b1], [a2 b2 a3 b3]
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  auto lo = [](__m512 x, __m512 y) {
    return _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(x), _mm512_castps_pd(y)));
  };
  auto hi = [](__m512 x, __m512 y) {
    return _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(x), _mm512_castps_pd(y)));
  };
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {  // r[4i + k], lane L: column 4L + k of rows 4i .. 4i+3
    r[4 * i] = lo(t[4 * i], t[4 * i + 2]);
    r[4 * i + 1] = hi(t[4 * i], t[4 * i + 2]);
    r[4 * i + 2] = lo(t[4 * i + 1], t[4 * i + 3]);
    r[4 * i + 3] = hi(t[4 * i + 1], t[4 * i + 3]);
  }
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {  // column 4L + k = lane L of r[k], r[4 + k], r[8 + k], r[12 + k]
    const __m512 ab_lo = _mm512_shuffle_f32x4(r[k], r[4 + k], 0x44);
    const __m512 ab_hi = _mm512_shuffle_f32x4(r[k], r[4 + k], 0xEE);
    const __m512 cd_lo = _mm512_shuffle_f32x4(r[8 + k], r[12 + k], 0x44);
    const __m512 cd_hi = _mm512_shuffle_f32x4(r[8 + k], r[12 + k], 0xEE);
    t[k] = _mm512_shuffle_f32x4(ab_lo, cd_lo, 0x88);
    t[4 + k] = _mm512_shuffle_f32x4(ab_lo, cd_lo, 0xDD);
    t[8 + k] = _mm512_shuffle_f32x4(ab_hi, cd_hi, 0x88);
    t[12 + k] = _mm512_shuffle_f32x4(ab_hi, cd_hi, 0xDD);
  }
#pragma GCC unroll 16
  for (int c = 0; c < 16; ++c) r[c] = t[c];
}

// Rows [0, n) of X (row stride ld, hd columns) transposed into panels: panel
// p holds X[32p + c][d] at dst[(p * hd + d) * 32 + c]; columns past n are
// zero. Moves 16 x 16 blocks through registers.
void pack_transposed_panels(float* dst, const float* X, int64_t ld, int64_t n, int64_t hd) {
  const int64_t blocks = padded_length(n) / 16;
  for (int64_t blk = 0; blk < blocks; ++blk) {
    float* out = dst + (blk / 2) * hd * kPanel + (blk % 2) * 16;
    const int64_t rows = std::min<int64_t>(16, n - blk * 16);
    for (int64_t d0 = 0; d0 < hd; d0 += 16) {
      const int64_t cols = std::min<int64_t>(16, hd - d0);
      const __mmask16 m = static_cast<__mmask16>((1u << cols) - 1u);
      __m512 r[16];
#pragma GCC unroll 16
      for (int c = 0; c < 16; ++c)
        r[c] = c < rows ? _mm512_maskz_loadu_ps(m, X + (blk * 16 + c) * ld + d0)
                        : _mm512_setzero_ps();
      transpose16x16(r);
      for (int64_t k = 0; k < cols; ++k) _mm512_storeu_ps(out + (d0 + k) * kPanel, r[k]);
    }
  }
}

// What a score tile stores, given acc = A_i . B_j over the head dimension:
enum class Epilogue {
  Scaled,         // S = alpha * acc (the forward; softmax follows)
  Probability,    // P = exp(alpha * acc - lse_i) where j <= i, else 0
  ScoreGradient,  // dS = P * (acc - D_i) where j <= i, else 0 (P read in place)
};

// One R x 32 tile at rows i0.. and columns col0..: A (R x hd, row stride lda)
// times one packed panel (hd x 32). rowv holds lse_i or D_i per tile row.
template <int R, Epilogue E>
void score_tile(float* S, int64_t lds, const float* A, int64_t lda, const float* panel,
                int64_t hd, float alpha, const float* rowv, const float* Pin, int64_t i0,
                int64_t col0) {
  __m512 acc[R][2];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  for (int64_t d = 0; d < hd; ++d) {
    const __m512 b0 = _mm512_loadu_ps(panel + d * kPanel);
    const __m512 b1 = _mm512_loadu_ps(panel + d * kPanel + 16);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m512 a = _mm512_set1_ps(A[r * lda + d]);
      acc[r][0] = _mm512_fmadd_ps(a, b0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(a, b1, acc[r][1]);
    }
  }
  const __m512 s = _mm512_set1_ps(alpha);
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int v = 0; v < 2; ++v) {
      float* out = S + r * lds + 16 * v;
      if constexpr (E == Epilogue::Scaled) {
        _mm512_storeu_ps(out, _mm512_mul_ps(acc[r][v], s));
      } else {
        const __mmask16 m = visible(col0 + 16 * v, i0 + r);
        __m512 x;
        if constexpr (E == Epilogue::Probability)
          x = exp16(_mm512_fmsub_ps(acc[r][v], s, _mm512_set1_ps(rowv[r])));
        else
          x = _mm512_mul_ps(_mm512_loadu_ps(Pin + r * lds + 16 * v),
                            _mm512_sub_ps(acc[r][v], _mm512_set1_ps(rowv[r])));
        _mm512_storeu_ps(out, _mm512_maskz_mov_ps(m, x));
      }
    }
}

template <Epilogue E>
using ScoreTile = void (*)(float*, int64_t, const float*, int64_t, const float*, int64_t, float,
                           const float*, const float*, int64_t, int64_t);

template <Epilogue E>
ScoreTile<E> pick_score_tile(int64_t rows) {
  constexpr ScoreTile<E> tiles[kTileRows + 1] = {
      nullptr,           score_tile<1, E>, score_tile<2, E>, score_tile<3, E>, score_tile<4, E>,
      score_tile<5, E>, score_tile<6, E>, score_tile<7, E>, score_tile<8, E>};
  return tiles[rows];
}

// Scores of block rows [r0, r1) against the packed columns, row i at
// S + (i - r0) * lds: each 8-row tile covers the panels up to the one holding
// its last row's diagonal; nothing past that panel is written. rowv and Pin
// are indexed like the rows (rowv[i - r0]; Pin with S's layout).
template <Epilogue E>
void causal_scores(float* S, int64_t lds, const float* A, int64_t lda, const float* panels,
                   int64_t hd, int64_t r0, int64_t r1, float alpha, const float* rowv,
                   const float* Pin) {
  for (int64_t i0 = r0; i0 < r1; i0 += kTileRows) {
    const int64_t rows = std::min<int64_t>(kTileRows, r1 - i0);
    const int64_t last = i0 + rows - 1;
    const auto tile = pick_score_tile<E>(rows);
    for (int64_t p = 0; p * kPanel <= last; ++p) {
      const int64_t at = (i0 - r0) * lds + p * kPanel;
      tile(S + at, lds, A + i0 * lda, lda, panels + p * hd * kPanel, hd, alpha,
           rowv ? rowv + (i0 - r0) : nullptr, Pin ? Pin + at : nullptr, i0, p * kPanel);
    }
  }
}

// Forward softmax of scaled scores rows [r0, r1): P[i, j] = exp(S - max) / sum
// for j <= i; zero for i < j < the end of i's 8-row tile (the columns the
// P.V product reads); lse_i saved for the backward.
void causal_softmax_rows(float* P, int64_t ldp, int64_t r0, int64_t r1, float* lse) {
  for (int64_t i = r0; i < r1; ++i) {
    float* row = P + (i - r0) * ldp;
    const int64_t n = i + 1;
    __m512 mx = _mm512_set1_ps(-INFINITY);
    for (int64_t j = 0; j < n; j += 16)
      mx = _mm512_max_ps(mx, _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), visible(j, i), row + j));
    const __m512 m = _mm512_set1_ps(_mm512_reduce_max_ps(mx));
    __m512 sum = _mm512_setzero_ps();
    for (int64_t j = 0; j < n; j += 16) {
      const __mmask16 k = visible(j, i);
      const __m512 e = _mm512_maskz_mov_ps(k, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, row + j), m)));
      sum = _mm512_add_ps(sum, e);
      _mm512_mask_storeu_ps(row + j, k, e);
    }
    const float total = _mm512_reduce_add_ps(sum);
    lse[i] = _mm512_reduce_max_ps(mx) + std::log(total);
    const __m512 inv = _mm512_set1_ps(1.0f / total);
    for (int64_t j = 0; j < n; j += 16) {
      const __mmask16 k = visible(j, i);
      _mm512_mask_storeu_ps(row + j, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, row + j), inv));
    }
    const int64_t tile_end = std::min(r1, r0 + (i - r0) / kTileRows * kTileRows + kTileRows);
    for (int64_t j = n; j < tile_end; ++j) row[j] = 0.f;
  }
}

// Cm (R rows, NV vectors of columns; the last vector masked by `tail`) =
// alpha * sum over k in [0, nk) of A(r, k) * Bm[k, :], added to what Cm holds
// when accumulate. A(r, k) = A[r * a_rs + k * a_cs], so A may be read
// transposed; Bm rows have stride ldb.
template <int R, int NV>
void rows_times_rows(float* Cm, int64_t ldc, const float* A, int64_t a_rs, int64_t a_cs,
                     const float* Bm, int64_t ldb, int64_t nk, float alpha, bool accumulate,
                     __mmask16 tail) {
  __m512 acc[R][NV];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  for (int64_t k = 0; k < nk; ++k) {
    __m512 b[NV];
#pragma GCC unroll 16
    for (int v = 0; v < NV - 1; ++v) b[v] = _mm512_loadu_ps(Bm + k * ldb + 16 * v);
    b[NV - 1] = _mm512_maskz_loadu_ps(tail, Bm + k * ldb + 16 * (NV - 1));
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m512 a = _mm512_set1_ps(A[r * a_rs + k * a_cs]);
#pragma GCC unroll 16
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(a, b[v], acc[r][v]);
    }
  }
  const __m512 s = _mm512_set1_ps(alpha);
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) {
      float* c = Cm + r * ldc + 16 * v;
      const __mmask16 m = v == NV - 1 ? tail : __mmask16(0xFFFF);
      __m512 x = _mm512_mul_ps(acc[r][v], s);
      if (accumulate) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(m, c));
      _mm512_mask_storeu_ps(c, m, x);
    }
}

// Product tiles: 8 rows (the score tiles' grid, so a product tile never
// reads past its rows' score tiles) x 2 vectors = 16 accumulators; measured
// faster than 4 rows x 4 vectors here.
constexpr int kProductRows = 8;
constexpr int kOutVecs = 2;
static_assert(kTileRows % kProductRows == 0);
using RowsTimesRows = void (*)(float*, int64_t, const float*, int64_t, int64_t, const float*,
                               int64_t, int64_t, float, bool, __mmask16);

template <int R>
RowsTimesRows pick_vecs(int nv) {
  return nv == 1 ? rows_times_rows<R, 1> : rows_times_rows<R, 2>;
}

RowsTimesRows pick_rows_times_rows(int rows, int nv) {
  constexpr RowsTimesRows (*by_rows[kProductRows + 1])(int) = {
      nullptr,      pick_vecs<1>, pick_vecs<2>, pick_vecs<3>, pick_vecs<4>,
      pick_vecs<5>, pick_vecs<6>, pick_vecs<7>, pick_vecs<8>};
  return by_rows[rows](nv);
}

// Output rows [m0, m1) of a (.., hd) matrix Cm (row stride ldc; Cm and Bm
// indexed by absolute row), in 8-row tiles from m0: row m gets alpha * sum
// over k of A(m, k) * Bm[k, :], k in [k_begin(tile's first row), k_end(tile's
// last row)): the causal bounds of the product. A points at element (m0, ka):
// A(m, k) = A[(m - m0) * a_rs + (k - ka) * a_cs].
template <typename KBegin, typename KEnd>
void rows_product(float* Cm, int64_t ldc, const float* A, int64_t a_rs, int64_t a_cs, int64_t ka,
                  const float* Bm, int64_t ldb, int64_t m0, int64_t m1, int64_t hd, float alpha,
                  bool accumulate, KBegin k_begin, KEnd k_end) {
  for (int64_t t0 = m0; t0 < m1; t0 += kProductRows) {
    const int rows = static_cast<int>(std::min<int64_t>(kProductRows, m1 - t0));
    const int64_t k0 = k_begin(t0), k1 = k_end(t0 + rows - 1);
    for (int64_t c0 = 0; c0 < hd; c0 += 16 * kOutVecs) {
      const int64_t width = std::min<int64_t>(16 * kOutVecs, hd - c0);
      const int nv = static_cast<int>((width + 15) / 16);
      const int64_t tail_cols = width - 16 * (nv - 1);
      const __mmask16 tail = static_cast<__mmask16>((1u << tail_cols) - 1u);
      pick_rows_times_rows(rows, nv)(Cm + t0 * ldc + c0, ldc,
                                     A + (t0 - m0) * a_rs + (k0 - ka) * a_cs, a_rs, a_cs,
                                     Bm + k0 * ldb + c0, ldb, k1 - k0, alpha, accumulate, tail);
    }
  }
}

}  // namespace

#include "meshtrain/kernels/cpu/attention_fused_driver.inc"

#else
#error "attention_fused.cpp is compiled for the avx512 level only (// isa-levels: avx512)"
#endif

}  // namespace meshtrain::cpu::MT_ISA_NS
