#include "meshtrain/linalg/dist_gemm.h"

#include <fmt/format.h>

#include "meshtrain/core/error.h"
#include "meshtrain/linalg/algorithms.h"

namespace meshtrain::linalg {

std::string_view gemm_algo_name(GemmAlgo a) {
  switch (a) {
    case GemmAlgo::Auto: return "auto";
    case GemmAlgo::OneD: return "1d";
    case GemmAlgo::Summa: return "summa";
    case GemmAlgo::Cannon: return "cannon";
    case GemmAlgo::TwoHalfD: return "2.5d";
    case GemmAlgo::SplitK: return "splitk";
  }
  return "?";
}

GemmAlgo gemm_algo_from_name(std::string_view name) {
  for (GemmAlgo a : {GemmAlgo::Auto, GemmAlgo::OneD, GemmAlgo::Summa, GemmAlgo::Cannon,
                     GemmAlgo::TwoHalfD, GemmAlgo::SplitK})
    if (gemm_algo_name(a) == name) return a;
  throw UsageError(fmt::format("unknown matmul algorithm '{}' (auto, 1d, summa, cannon, 2.5d, "
                               "splitk)", name));
}

namespace detail {

bool c_layout_suits(GemmAlgo algo, const MatrixLayout& C, int world_size, int c) {
  switch (algo) {
    case GemmAlgo::Summa: return true;
    case GemmAlgo::Cannon: return C.p == C.q && C.is_block();
    case GemmAlgo::TwoHalfD: return C.p == C.q && c >= 1 && c * C.p * C.q <= world_size;
    case GemmAlgo::OneD: return (C.p == 1 || C.q == 1) && C.is_block();
    case GemmAlgo::SplitK: return C.q == 1 && C.is_block();
    case GemmAlgo::Auto: break;
  }
  return false;
}

std::pair<MatrixLayout, MatrixLayout> operand_layouts(GemmAlgo algo, const MatrixLayout& C,
                                                      int64_t k, int64_t panel) {
  const int64_t m = C.rows, n = C.cols;
  const int p = C.p, q = C.q, P = p * q;
  switch (algo) {
    case GemmAlgo::Summa:
    case GemmAlgo::TwoHalfD: {
      // k blocked like C's columns (or the panel): A's rows and B's columns as C's.
      const int64_t kb = panel > 0 ? panel : std::max<int64_t>(1, std::min(C.nb, C.mb));
      return {MatrixLayout::block_cyclic(m, k, C.mb, kb, p, q),
              MatrixLayout::block_cyclic(k, n, kb, C.nb, p, q)};
    }
    case GemmAlgo::Cannon: {
      // A's rows and B's columns blocked as C's (any block that fits one per rank).
      const int64_t kb = std::max<int64_t>(1, (k + p - 1) / p);
      return {MatrixLayout::block_cyclic(m, k, C.mb, kb, p, q),
              MatrixLayout::block_cyclic(k, n, kb, C.nb, p, q)};
    }
    case GemmAlgo::OneD:
      if (q == 1)
        return {MatrixLayout::block_cyclic(m, k, C.mb, std::max<int64_t>(1, k), P, 1),
                MatrixLayout::block(k, n, P, 1)};
      return {MatrixLayout::block(m, k, 1, P),
              MatrixLayout::block_cyclic(k, n, std::max<int64_t>(1, k), C.nb, 1, P)};
    case GemmAlgo::SplitK:
      return {MatrixLayout::block(m, k, 1, P), MatrixLayout::block(k, n, P, 1)};
    case GemmAlgo::Auto: break;
  }
  fail("operand layouts: no algorithm chosen");
}

bool operands_suit(GemmAlgo algo, const MatrixLayout& A, const MatrixLayout& B,
                   const MatrixLayout& C) {
  if (algo == GemmAlgo::Summa || algo == GemmAlgo::TwoHalfD)
    return A.p == C.p && A.q == C.q && A.mb == C.mb && B.p == C.p && B.q == C.q && B.nb == C.nb;
  auto [a, b] = operand_layouts(algo, C, A.cols, 0);
  return A == a && B == b;
}

}  // namespace detail

std::pair<MatrixLayout, MatrixLayout> gemm_operand_layouts(GemmAlgo algo, const MatrixLayout& C,
                                                           int64_t k, int64_t panel) {
  return detail::operand_layouts(algo, C, k, panel);
}

namespace {

// The algorithm for C's layout when the caller left it to us: the shape of
// C's grid decides (1D grids: the ring; square block grids: Cannon; else
// SUMMA). The planner (gemm_plan.h) picks the grid itself.
GemmAlgo choose_for_layout(const MatrixLayout& C) {
  if ((C.p == 1 || C.q == 1) && C.is_block() && C.p * C.q > 1) return GemmAlgo::OneD;
  if (C.p == C.q && C.is_block() && C.p > 1) return GemmAlgo::Cannon;
  return GemmAlgo::Summa;
}

}  // namespace

GemmResult gemm(Context& ctx, bool trans_a, bool trans_b, double alpha, const DistMatrix& A,
                const DistMatrix& B, double beta, DistMatrix& C, const GemmOptions& opts) {
  const auto t0 = GemmClock::now();
  const MatrixLayout& cl = C.layout();
  const int64_t m = trans_a ? A.layout().cols : A.layout().rows;
  const int64_t k = trans_a ? A.layout().rows : A.layout().cols;
  const int64_t kb = trans_b ? B.layout().cols : B.layout().rows;
  const int64_t n = trans_b ? B.layout().rows : B.layout().cols;
  MT_CHECK(m == cl.rows && n == cl.cols && k == kb, "distributed gemm: op(A) is {}x{}, op(B) {}x{}, "
           "C {}x{}: the shapes do not multiply", m, k, kb, n, cl.rows, cl.cols);
  MT_CHECK(A.dtype() == B.dtype(), "distributed gemm: A is {} and B {}; they must match",
           dtype_name(A.dtype()), dtype_name(B.dtype()));
  MT_CHECK(C.dtype() == result_dtype(A.dtype()), "distributed gemm: C must be {} for {} operands, "
           "not {}", dtype_name(result_dtype(A.dtype())), dtype_name(A.dtype()), dtype_name(C.dtype()));
  MT_CHECK(cl.p * cl.q <= ctx.size(), "distributed gemm: C's {}x{} grid needs more than the job's "
           "{} ranks", cl.p, cl.q, ctx.size());
  GemmResult res;
  GemmAlgo algo = opts.algo == GemmAlgo::Auto ? choose_for_layout(cl) : opts.algo;
  int layers = 1;
  if (algo == GemmAlgo::TwoHalfD)
    layers = opts.layers > 0 ? opts.layers : std::max(1, ctx.size() / (cl.p * cl.q));
  MT_CHECK(detail::c_layout_suits(algo, cl, ctx.size(), layers), "distributed gemm: {} cannot "
           "keep C in its layout {} (cannon: a square grid in blocks; 1d: a 1 x P or P x 1 grid in "
           "blocks; splitk: P x 1 blocks; 2.5d: a square grid and c layers of it within the job)",
           gemm_algo_name(algo), cl.str());
  res.algo = algo;
  res.grid = layers > 1 ? fmt::format("{}x{}x{}", cl.p, cl.q, layers) : fmt::format("{}x{}", cl.p, cl.q);
  TrafficMeter meter(ctx);
  // Operands into the algorithm's layouts (a transpose is a redistribution).
  DistMatrix a_moved, b_moved;
  const DistMatrix* a = &A;
  const DistMatrix* b = &B;
  auto [want_a, want_b] = detail::operand_layouts(algo, cl, k, opts.panel);
  if (trans_a || trans_b || !detail::operands_suit(algo, A.layout(), B.layout(), cl)) {
    const bool a_ok = !trans_a && detail::operands_suit(algo, A.layout(), want_b, cl);
    const bool b_ok = !trans_b && detail::operands_suit(algo, want_a, B.layout(), cl);
    if (!a_ok) {
      a_moved = redistribute(ctx, A, want_a, trans_a);
      a = &a_moved;
      res.note += fmt::format("A moved to {}{}; ", want_a.str(), trans_a ? " (transposed)" : "");
    }
    if (!b_ok) {
      b_moved = redistribute(ctx, B, want_b, trans_b);
      b = &b_moved;
      res.note += fmt::format("B moved to {}{}; ", want_b.str(), trans_b ? " (transposed)" : "");
    }
  }
  res.moved = meter.since(ctx);
  detail::GemmCall call{&ctx, alpha, beta, a, b, &C, opts.panel, std::max(0, opts.lookahead), &res.times};
  switch (algo) {
    case GemmAlgo::Summa: detail::run_summa(call); break;
    case GemmAlgo::TwoHalfD: detail::run_25d(call, layers); break;
    case GemmAlgo::Cannon: detail::run_cannon(call); break;
    case GemmAlgo::OneD: detail::run_ring_1d(call); break;
    case GemmAlgo::SplitK: detail::run_splitk(call); break;
    case GemmAlgo::Auto: break;
  }
  res.traffic = meter.since(ctx);
  res.times.total_s = seconds_since(t0);
  return res;
}

}  // namespace meshtrain::linalg
