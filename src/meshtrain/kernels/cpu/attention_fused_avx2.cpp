// isa-levels: avx2
// The fused causal attention of attention_fused.cpp for AVX2 + FMA: the same
// packed 32-column K/V panels, causal score tiles on an 8-row grid and
// register-blocked products on the strided q/k/v rows, with register tiles
// sized for 16 ymm registers and integer lane masks where AVX-512 has mask
// registers. Same workspace (attention_workspace_floats) and results to rounding.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "meshtrain/kernels/cpu/attention.h"
#include "meshtrain/kernels/cpu/vec_math_avx2.h"

#if !defined(__AVX2__) || !defined(__FMA__)
#error "attention_fused_avx2.cpp is compiled for the avx2 level only (// isa-levels: avx2)"
#endif

namespace meshtrain::cpu::MT_ISA_NS {

namespace {

// Score columns per packed panel (four 8-float vectors); the panel layout and
// padding are the AVX-512 kernel's, so the workspace size is shared.
constexpr int64_t kPanel = kAttentionPanel;
int64_t padded_length(int64_t T) { return (T + kPanel - 1) / kPanel * kPanel; }
int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

// Rows of the tile grid: score tiles and product tiles share it, so a product
// never reads a score column its row's tile left unwritten.
constexpr int kTileRows = 8;
static_assert(kAttentionRowBlock % kTileRows == 0);

// Register tile of the scores: 4 rows x 2 vectors = 8 accumulators (enough
// independent FMA chains to hide the latency) plus 2 panel vectors and one
// broadcast; an 8 x 32 grid tile is covered by 2 x 2 of them. Measured at hd 64
// ~15% faster overall than 2 x 4 or 4 x 4 (which spills).
constexpr int kScoreRows = 4;
constexpr int kScoreVecs = 2;
constexpr int kScoreCols = 8 * kScoreVecs;
static_assert(kTileRows % kScoreRows == 0 && kPanel % kScoreCols == 0);

// All-ones in lanes [0, n) of 8, n clamped to [0, 8]: AVX2's stand-in for a
// mask register (maskload/maskstore and and_ps take it).
__m256i lanes_below(int64_t n) {
  const int k = static_cast<int>(n < 0 ? 0 : n > 8 ? 8 : n);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// exp(x) per lane, clamped like fast_expf.
inline __m256 exp8(__m256 x) {
  // Clamp with x as the second operand: min/max return the second operand
  // when either is NaN, so a NaN score stays NaN instead of becoming e^88.
  return exp8_in_range(
      _mm256_max_ps(_mm256_set1_ps(-87.0f), _mm256_min_ps(_mm256_set1_ps(88.0f), x)));
}

// Lanes at columns col0 .. col0+7 that a causal row i may see (col <= i).
inline __m256 visible(int64_t col0, int64_t i) {
  return _mm256_castsi256_ps(lanes_below(i - col0 + 1));
}

float hmax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Transposes the 8 x 8 block held in r[0..7] (row c in r[c]) in place.
inline void transpose8x8(__m256 r[8]) {
  __m256 t[8], s[8];
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {  // per 128-bit lane: [a0 b0 a1 b1], [a2 b2 a3 b3]
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {  // s[4h + k]: column k (low half), k + 4 (high) of rows 4h..4h+3
    s[4 * h] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], 0x44);
    s[4 * h + 1] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], 0xEE);
    s[4 * h + 2] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0x44);
    s[4 * h + 3] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0xEE);
  }
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
    r[k] = _mm256_permute2f128_ps(s[k], s[4 + k], 0x20);
    r[k + 4] = _mm256_permute2f128_ps(s[k], s[4 + k], 0x31);
  }
}

// Rows [0, n) of X (row stride ld, hd columns) transposed into panels: panel
// p holds X[32p + c][d] at dst[(p * hd + d) * 32 + c]; columns past n are
// zero. Moves 8 x 8 blocks through registers.
void pack_transposed_panels(float* dst, const float* X, int64_t ld, int64_t n, int64_t hd) {
  const int64_t blocks = padded_length(n) / 8;
  for (int64_t blk = 0; blk < blocks; ++blk) {
    float* out = dst + (blk / 4) * hd * kPanel + (blk % 4) * 8;
    const int64_t rows = n - blk * 8;  // may be <= 0 in the padding
    for (int64_t d0 = 0; d0 < hd; d0 += 8) {
      const int64_t cols = min64(8, hd - d0);
      const __m256i m = lanes_below(cols);
      __m256 r[8];
#pragma GCC unroll 8
      for (int c = 0; c < 8; ++c) {
        const float* src = X + (blk * 8 + c) * ld + d0;
        r[c] = c >= rows    ? _mm256_setzero_ps()
               : cols == 8 ? _mm256_loadu_ps(src)
                           : _mm256_maskload_ps(src, m);
      }
      transpose8x8(r);
      for (int64_t k = 0; k < cols; ++k) _mm256_storeu_ps(out + (d0 + k) * kPanel, r[k]);
    }
  }
}

// What a score tile stores, given acc = A_i . B_j over the head dimension:
enum class Epilogue {
  Scaled,         // S = alpha * acc (the forward; softmax follows)
  Probability,    // P = exp(alpha * acc - lse_i) where j <= i, else 0
  ScoreGradient,  // dS = P * (acc - D_i) where j <= i, else 0 (P read in place)
};

// One R x 8NV tile at rows i0.. and columns col0..: A (R x hd, row stride
// lda) times NV vectors of a packed panel (panel points at the first, row
// stride kPanel). rowv holds lse_i or D_i per tile row.
template <int R, int NV, Epilogue E>
void score_tile(float* S, int64_t lds, const float* A, int64_t lda, const float* panel,
                int64_t hd, float alpha, const float* rowv, const float* Pin, int64_t i0,
                int64_t col0) {
  __m256 acc[R][NV];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm256_setzero_ps();
  for (int64_t d = 0; d < hd; ++d) {
    __m256 b[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) b[v] = _mm256_loadu_ps(panel + d * kPanel + 8 * v);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m256 a = _mm256_broadcast_ss(A + r * lda + d);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm256_fmadd_ps(a, b[v], acc[r][v]);
    }
  }
  const __m256 s = _mm256_set1_ps(alpha);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      float* out = S + r * lds + 8 * v;
      if constexpr (E == Epilogue::Scaled) {
        _mm256_storeu_ps(out, _mm256_mul_ps(acc[r][v], s));
      } else {
        __m256 x;
        if constexpr (E == Epilogue::Probability)
          x = exp8(_mm256_fmsub_ps(acc[r][v], s, _mm256_set1_ps(rowv[r])));
        else
          x = _mm256_mul_ps(_mm256_loadu_ps(Pin + r * lds + 8 * v),
                            _mm256_sub_ps(acc[r][v], _mm256_set1_ps(rowv[r])));
        // Full-vector store: the masked-off lanes are the zeros the products read.
        _mm256_storeu_ps(out, _mm256_and_ps(visible(col0 + 8 * v, i0 + r), x));
      }
    }
}

template <Epilogue E>
using ScoreTile = void (*)(float*, int64_t, const float*, int64_t, const float*, int64_t, float,
                           const float*, const float*, int64_t, int64_t);

template <Epilogue E>
ScoreTile<E> pick_score_tile(int64_t rows) {
  static_assert(kScoreRows == 4);
  constexpr ScoreTile<E> tiles[kScoreRows + 1] = {
      nullptr, score_tile<1, kScoreVecs, E>, score_tile<2, kScoreVecs, E>,
      score_tile<3, kScoreVecs, E>, score_tile<4, kScoreVecs, E>};
  return tiles[rows];
}

// Scores of block rows [r0, r1) against the packed columns, row i at
// S + (i - r0) * lds: each 8-row grid tile covers the columns up to the
// 16-column chunk holding its last row's diagonal (nothing a product or the
// softmax reads lies past it; nothing past it is written). rowv and Pin are
// indexed like the rows (rowv[i - r0]; Pin with S's layout).
template <Epilogue E>
void causal_scores(float* S, int64_t lds, const float* A, int64_t lda, const float* panels,
                   int64_t hd, int64_t r0, int64_t r1, float alpha, const float* rowv,
                   const float* Pin) {
  for (int64_t g0 = r0; g0 < r1; g0 += kTileRows) {
    const int64_t last = min64(g0 + kTileRows, r1) - 1;
    for (int64_t col0 = 0; col0 <= last; col0 += kScoreCols) {
      const float* panel = panels + (col0 / kPanel) * hd * kPanel + col0 % kPanel;
      for (int64_t i0 = g0; i0 <= last; i0 += kScoreRows) {
        const int64_t at = (i0 - r0) * lds + col0;
        pick_score_tile<E>(min64(kScoreRows, last + 1 - i0))(
            S + at, lds, A + i0 * lda, lda, panel, hd, alpha, rowv ? rowv + (i0 - r0) : nullptr,
            Pin ? Pin + at : nullptr, i0, col0);
      }
    }
  }
}

// Forward softmax of scaled scores rows [r0, r1): P[i, j] = exp(S - max) / sum
// for j <= i; zero for i < j < the end of i's 8-row tile (the columns the
// P.V product reads); lse_i saved for the backward. Row i's scores are
// written through its tile's last 16-column chunk, so whole vectors up to
// column i are read and written, with the columns past i masked.
void causal_softmax_rows(float* P, int64_t ldp, int64_t r0, int64_t r1, float* lse) {
  const __m256 ninf = _mm256_set1_ps(-INFINITY);
  for (int64_t i = r0; i < r1; ++i) {
    float* row = P + (i - r0) * ldp;
    const int64_t n = i + 1;
    __m256 mx = ninf;
    // A NaN score may or may not survive hmax; either way its exp makes the
    // sum, so lse_i and the whole row, NaN.
    for (int64_t j = 0; j < n; j += 8)
      mx = _mm256_max_ps(mx, _mm256_blendv_ps(ninf, _mm256_loadu_ps(row + j), visible(j, i)));
    const float mxs = hmax(mx);
    const __m256 m = _mm256_set1_ps(mxs);
    __m256 sum = _mm256_setzero_ps();
    for (int64_t j = 0; j < n; j += 8) {
      const __m256 e =
          _mm256_and_ps(visible(j, i), exp8(_mm256_sub_ps(_mm256_loadu_ps(row + j), m)));
      sum = _mm256_add_ps(sum, e);
      _mm256_storeu_ps(row + j, e);
    }
    const float total = hsum(sum);
    lse[i] = mxs + logf(total);
    const __m256 inv = _mm256_set1_ps(1.0f / total);
    for (int64_t j = 0; j < n; j += 8)  // masked again: a NaN inv must not fill columns past i
      _mm256_storeu_ps(row + j,
                       _mm256_and_ps(visible(j, i), _mm256_mul_ps(_mm256_loadu_ps(row + j), inv)));
    const int64_t tile_end = min64(r1, r0 + (i - r0) / kTileRows * kTileRows + kTileRows);
    for (int64_t j = (n + 7) / 8 * 8; j < tile_end; ++j) row[j] = 0.f;
  }
}

// Cm (R rows, NV vectors of columns; the last vector masked by `tail` when
// Tail, a template flag so whole vectors skip maskload's extra uop) = alpha * sum over k in [0, nk) of A(r, k) * Bm[k, :], added to what
// Cm holds when accumulate. A(r, k) = A[r * a_rs + k * a_cs], so A may be read
// transposed; Bm rows have stride ldb.
template <int R, int NV, bool Tail>
void rows_times_rows(float* Cm, int64_t ldc, const float* A, int64_t a_rs, int64_t a_cs,
                     const float* Bm, int64_t ldb, int64_t nk, float alpha, bool accumulate,
                     __m256i tail) {
  __m256 acc[R][NV];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm256_setzero_ps();
  for (int64_t k = 0; k < nk; ++k) {
    __m256 b[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v)
      b[v] = Tail && v == NV - 1 ? _mm256_maskload_ps(Bm + k * ldb + 8 * v, tail)
                                 : _mm256_loadu_ps(Bm + k * ldb + 8 * v);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m256 a = _mm256_broadcast_ss(A + r * a_rs + k * a_cs);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm256_fmadd_ps(a, b[v], acc[r][v]);
    }
  }
  const __m256 s = _mm256_set1_ps(alpha);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      float* c = Cm + r * ldc + 8 * v;
      __m256 x = _mm256_mul_ps(acc[r][v], s);
      if (Tail && v == NV - 1) {
        if (accumulate) x = _mm256_add_ps(x, _mm256_maskload_ps(c, tail));
        _mm256_maskstore_ps(c, tail, x);
      } else {
        if (accumulate) x = _mm256_add_ps(x, _mm256_loadu_ps(c));
        _mm256_storeu_ps(c, x);
      }
    }
}

// Product tiles: 4 rows (half the 8-row grid, so a tile never reads past
// its rows' score tiles) x 3 vectors = 12 accumulators, 3 vectors of B and a
// broadcast. Measured at hd 64: 4 x 2 is ~7% slower overall, 2 x 4 ~45%;
// column chunks as the outer loop gain nothing.
constexpr int kProductRows = 4;
constexpr int kOutVecs = 3;
static_assert(kTileRows % kProductRows == 0);
using RowsTimesRows = void (*)(float*, int64_t, const float*, int64_t, int64_t, const float*,
                               int64_t, int64_t, float, bool, __m256i);

template <int R, int NV>
RowsTimesRows pick_tail(bool tail) {
  return tail ? rows_times_rows<R, NV, true> : rows_times_rows<R, NV, false>;
}

template <int R>
RowsTimesRows pick_vecs(int nv, bool tail) {
  static_assert(kOutVecs == 3);
  return nv == 1 ? pick_tail<R, 1>(tail) : nv == 2 ? pick_tail<R, 2>(tail) : pick_tail<R, 3>(tail);
}

RowsTimesRows pick_rows_times_rows(int rows, int nv, bool tail) {
  static_assert(kProductRows == 4);
  constexpr RowsTimesRows (*by_rows[kProductRows + 1])(int, bool) = {
      nullptr, pick_vecs<1>, pick_vecs<2>, pick_vecs<3>, pick_vecs<4>};
  return by_rows[rows](nv, tail);
}

// Output rows [m0, m1) of a (.., hd) matrix Cm (row stride ldc; Cm and Bm
// indexed by absolute row), in 4-row tiles from m0: row m gets alpha * sum
// over k of A(m, k) * Bm[k, :], k in [k_begin(tile's first row), k_end(tile's
// last row)): the causal bounds of the product. A points at element (m0, ka):
// A(m, k) = A[(m - m0) * a_rs + (k - ka) * a_cs].
template <typename KBegin, typename KEnd>
void rows_product(float* Cm, int64_t ldc, const float* A, int64_t a_rs, int64_t a_cs, int64_t ka,
                  const float* Bm, int64_t ldb, int64_t m0, int64_t m1, int64_t hd, float alpha,
                  bool accumulate, KBegin k_begin, KEnd k_end) {
  for (int64_t t0 = m0; t0 < m1; t0 += kProductRows) {
    const int rows = static_cast<int>(min64(kProductRows, m1 - t0));
    const int64_t k0 = k_begin(t0), k1 = k_end(t0 + rows - 1);
    for (int64_t c0 = 0; c0 < hd; c0 += 8 * kOutVecs) {
      const int64_t width = min64(8 * kOutVecs, hd - c0);
      const int nv = static_cast<int>((width + 7) / 8);
      const int64_t tail_cols = width - 8 * (nv - 1);
      pick_rows_times_rows(rows, nv, tail_cols < 8)(
          Cm + t0 * ldc + c0, ldc, A + (t0 - m0) * a_rs + (k0 - ka) * a_cs, a_rs, a_cs,
          Bm + k0 * ldb + c0, ldb, k1 - k0, alpha, accumulate, lanes_below(tail_cols));
    }
  }
}

}  // namespace

#include "meshtrain/kernels/cpu/attention_fused_driver.inc"

}  // namespace meshtrain::cpu::MT_ISA_NS
