// The distributed multiply's check matrix, shared by the shm test
// (tests/unit/linalg_gemm_mp_test.cpp) and linalg_check, the rank program the
// MPI test runs under mpirun: every algorithm x f64/f32/bf16 x transposes on
// odd shapes for a world of P ranks, each product compared with one computed
// in long double from the gathered operands within the error bound
// |C - C_ref| <= (k + 2) eps (|alpha| |A| |B| + |beta| |C0|) (max norms; eps
// of the accumulation type).
#pragma once
#include <fmt/format.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "meshtrain/linalg/dist_gemm.h"
#include "meshtrain/linalg/matrix_values.h"

namespace meshtrain::linalg::testing {

struct Case {
  GemmAlgo algo = GemmAlgo::Auto;
  MatrixLayout c;
  DType dt = DType::F64;
  bool ta = false, tb = false;
  int64_t k = 0;
  double alpha = 1.0, beta = 0.0;
  int64_t panel = 0;
  int lookahead = 1;
  int layers = 0;
  // Operand layouts (stored shapes); default: what the algorithm wants.
  std::optional<MatrixLayout> a, b;
};

inline Case mk(GemmAlgo algo, MatrixLayout c, DType dt, bool ta, bool tb, int64_t k, double alpha = 1.0,
        double beta = 0.0, int64_t panel = 0, int lookahead = 1, int layers = 0) {
  Case cs;
  cs.algo = algo;
  cs.c = c;
  cs.dt = dt;
  cs.ta = ta;
  cs.tb = tb;
  cs.k = k;
  cs.alpha = alpha;
  cs.beta = beta;
  cs.panel = panel;
  cs.lookahead = lookahead;
  cs.layers = layers;
  return cs;
}

inline std::string describe(const Case& c) {
  return fmt::format("{} C {} {} ta={} tb={} k={} alpha={} beta={} panel={} lookahead={}",
                     gemm_algo_name(c.algo), c.c.str(), dtype_name(c.dt), c.ta, c.tb, c.k, c.alpha,
                     c.beta, c.panel, c.lookahead);
}

// "" or what went wrong.
inline std::string check(Context& ctx, const Case& cs) {
  const int64_t m = cs.c.rows, n = cs.c.cols, k = cs.k;
  auto [wa, wb] = gemm_operand_layouts(cs.algo == GemmAlgo::Auto ? GemmAlgo::Summa : cs.algo, cs.c, k, cs.panel);
  MatrixLayout la = cs.a ? *cs.a : wa, lb = cs.b ? *cs.b : wb;
  if (cs.ta && !cs.a) la = MatrixLayout::block_cyclic(k, m, 4, 3, cs.c.p, cs.c.q);
  if (cs.tb && !cs.b) lb = MatrixLayout::block_cyclic(n, k, 2, 5, cs.c.p, cs.c.q);
  DistMatrix A(la, cs.dt, ctx.rank()), B(lb, cs.dt, ctx.rank()), C(cs.c, result_dtype(cs.dt), ctx.rank());
  A.fill([](int64_t i, int64_t j) { return matrix_value(11, i, j); });
  B.fill([](int64_t i, int64_t j) { return matrix_value(12, i, j); });
  C.fill([](int64_t i, int64_t j) { return matrix_value(13, i, j); });
  const std::vector<double> a = A.gather(ctx), b = B.gather(ctx), c0 = C.gather(ctx);
  GemmOptions o;
  o.algo = cs.algo;
  o.panel = cs.panel;
  o.lookahead = cs.lookahead;
  o.layers = cs.layers;
  GemmResult r = gemm(ctx, cs.ta, cs.tb, cs.alpha, A, B, cs.beta, C, o);
  const std::vector<double> got = C.gather(ctx);
  double amax = 0, bmax = 0, cmax = 0, err = 0;
  for (double v : a) amax = std::max(amax, std::abs(v));
  for (double v : b) bmax = std::max(bmax, std::abs(v));
  for (double v : c0) cmax = std::max(cmax, std::abs(v));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      long double s = 0;
      for (int64_t l = 0; l < k; ++l) {
        const double av = cs.ta ? a[l * m + i] : a[i * k + l];
        const double bv = cs.tb ? b[j * k + l] : b[l * n + j];
        s += static_cast<long double>(av) * bv;
      }
      const long double want = cs.alpha * s + cs.beta * c0[i * n + j];
      err = std::max(err, static_cast<double>(std::fabs(want - got[i * n + j])));
    }
  const double eps = result_dtype(cs.dt) == DType::F64 ? DBL_EPSILON : FLT_EPSILON;
  const double bound = (k + 2) * eps * (std::abs(cs.alpha) * amax * bmax + std::abs(cs.beta) * cmax);
  if (!(err <= bound))
    return fmt::format("{}: max error {:.3g} above the bound {:.3g} ({})\n", describe(cs), err, bound,
                       r.note);
  if (r.algo != cs.algo && cs.algo != GemmAlgo::Auto)
    return fmt::format("{}: ran {}\n", describe(cs), gemm_algo_name(r.algo));
  return "";
}

// Every factorization p x q of P.
inline std::vector<std::pair<int, int>> grids(int P) {
  std::vector<std::pair<int, int>> g;
  for (int p = 1; p <= P; ++p)
    if (P % p == 0) g.push_back({p, P / p});
  return g;
}

inline std::vector<Case> cases_for(int P) {
  std::vector<Case> cs;
  const DType dts[] = {DType::F64, DType::F32, DType::BF16};
  for (auto [p, q] : grids(P)) {
    // SUMMA on block-cyclic blocks that fit no shape evenly, every dtype and transpose.
    for (DType dt : dts)
      for (int t = 0; t < 4; ++t)
        cs.push_back(mk(GemmAlgo::Summa, MatrixLayout::block_cyclic(37, 29, 3, 5, p, q), dt, (t & 1) != 0,
                      (t & 2) != 0, 23, 1.5, t == 3 ? -0.5 : 0.0, t == 2 ? 2 : 0, t % 3));
    // k below the block; a block layout; no look-ahead and a deep one.
    cs.push_back(mk(GemmAlgo::Summa, MatrixLayout::block_cyclic(11, 9, 4, 4, p, q), DType::F64, false, false, 2));
    cs.push_back(mk(GemmAlgo::Summa, MatrixLayout::block(19, 21, p, q), DType::F32, false, true, 17, 1, 1, 0, 0));
    cs.push_back(mk(GemmAlgo::Summa, MatrixLayout::block(19, 21, p, q), DType::F64, true, false, 17, 1, 1, 5, 3));
  }
  // 1D both ways, split-k, with each dtype and the transposes.
  for (DType dt : dts) {
    cs.push_back(mk(GemmAlgo::OneD, MatrixLayout::block(41, 13, P, 1), dt, false, false, 27, 1, 0.25));
    cs.push_back(mk(GemmAlgo::OneD, MatrixLayout::block(13, 41, 1, P), dt, true, false, 27));
    cs.push_back(mk(GemmAlgo::SplitK, MatrixLayout::block(14, 9, P, 1), dt, false, true, 53, -1, 2));
    cs.push_back(mk(GemmAlgo::SplitK, MatrixLayout::block(14, 9, P, 1), dt, true, true, 53, 1, 0, 3));
  }
  cs.push_back(mk(GemmAlgo::OneD, MatrixLayout::block(5, 7, P, 1), DType::F64, false, false, 2));
  // C in blocks larger than m / P (the last ranks hold fewer rows or none),
  // or, on one rank, in small blocks (one grid row holds them all in order).
  const int64_t big = P > 1 ? (41 + P - 2) / (P - 1) : 3;
  cs.push_back(mk(GemmAlgo::OneD, MatrixLayout::block_cyclic(41, 13, big, 13, P, 1), DType::F32, false, true, 27));
  cs.push_back(mk(GemmAlgo::OneD, MatrixLayout::block_cyclic(13, 41, 13, big, 1, P), DType::F64, false, false, 27));
  cs.push_back(mk(GemmAlgo::SplitK, MatrixLayout::block_cyclic(41, 9, big, 9, P, 1), DType::F64, false, false, 30));
  // Square grids: Cannon (operands also given block-cyclic: moved first).
  for (int s = 1; s * s <= P; ++s) {
    if (s * s != P) continue;
    for (DType dt : dts)
      cs.push_back(mk(GemmAlgo::Cannon, MatrixLayout::block(31, 26, s, s), dt, false, false, 19, 1, 0.5));
    Case moved = mk(GemmAlgo::Cannon, MatrixLayout::block(31, 26, s, s), DType::F64, false, true, 19);
    moved.a = MatrixLayout::block_cyclic(31, 19, 2, 3, s, s);
    cs.push_back(moved);
    cs.push_back(mk(GemmAlgo::Cannon, MatrixLayout::block(7, 5, s, s), DType::F32, false, false, 2));
    const int64_t tall = s > 1 ? (31 + s - 2) / (s - 1) : 4;  // oversized blocks, or small ones on 1 x 1
    cs.push_back(mk(GemmAlgo::Cannon, MatrixLayout::block_cyclic(31, 26, tall, 26 / s + 1, s, s), DType::F64,
                    true, false, 19));
  }
  // 2.5D: c layers of an s x s grid wherever c s^2 == P.
  for (int s = 1; s * s <= P; ++s)
    if (P % (s * s) == 0 && P / (s * s) > 1) {
      const int c = P / (s * s);
      for (DType dt : dts)
        cs.push_back(mk(GemmAlgo::TwoHalfD, MatrixLayout::block_cyclic(23, 17, 3, 4, s, s), dt, false,
                      dt == DType::F32, 29, 1, 0.75, 0, 1, c));
    }
  return cs;
}

// "" when every case of a P-rank world holds, else one line per failure.
inline std::string check_all(Context& ctx) {
  std::string errors;
  for (const Case& c : cases_for(ctx.size())) errors += check(ctx, c);
  return errors;
}

}  // namespace meshtrain::linalg::testing
