#include "meshtrain/linalg/gemm_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "meshtrain/core/error.h"

namespace meshtrain::linalg {

std::string GemmCandidate::grid() const {
  return c > 1 ? fmt::format("{}x{}x{}", p, q, c) : fmt::format("{}x{}", p, q);
}

MatrixLayout GemmCandidate::c_layout(int64_t m, int64_t n) const {
  if (algo == GemmAlgo::Summa || algo == GemmAlgo::TwoHalfD)
    return MatrixLayout::block_cyclic(m, n, std::max<int64_t>(1, panel), std::max<int64_t>(1, panel), p, q);
  return MatrixLayout::block(m, n, p, q);
}

double formula_bytes(const GemmCandidate& c, const GemmProblem& p) {
  const double m = p.m, n = p.n, k = p.k, e = dtype_size(p.dtype);
  const double ce = dtype_size(result_dtype(p.dtype));
  const double P = p.ranks;
  switch (c.algo) {
    case GemmAlgo::Summa:
      return ((c.q > 1 ? m / c.p * k : 0) + (c.p > 1 ? k * n / c.q : 0)) * e;
    case GemmAlgo::Cannon:
      return c.p > 1 ? (m * k + k * n) / c.p * e : 0;
    case GemmAlgo::TwoHalfD: {
      const double s = c.p;
      return ((s > 1 ? (m / s * k + k * n / s) / c.c : 0) + (c.c > 1 ? (m * k + k * n) / (s * s) : 0)) * e +
             (c.c > 1 ? m * n / (s * s) * ce : 0);
    }
    case GemmAlgo::OneD:
      return (c.q == 1 ? k * n : m * k) * (P - 1) / P * e;
    case GemmAlgo::SplitK:
      return m * n * (P - 1) / P * ce;
    case GemmAlgo::Auto: break;
  }
  return 0;
}

namespace {

// Split-k's row chunks by default (ring_1d.cpp): one when the k-slice is
// longer than C is wide or tall, else 4.
double splitk_chunks(const GemmProblem& p) {
  return p.k / std::max(1, p.ranks) >= std::max(p.m, p.n) ? 1.0 : 4.0;
}

double messages_of(const GemmCandidate& c, const GemmProblem& p) {
  switch (c.algo) {
    case GemmAlgo::Summa: return ((c.q > 1) + (c.p > 1)) * std::ceil(double(p.k) / c.panel);
    case GemmAlgo::Cannon: return 2.0 * c.p;
    case GemmAlgo::TwoHalfD: return 2.0 * std::ceil(double(p.k) / c.panel) / c.c + 3;
    case GemmAlgo::OneD: return p.ranks - 1;
    case GemmAlgo::SplitK: return splitk_chunks(p);
    case GemmAlgo::Auto: break;
  }
  return 0;
}

double memory_of(const GemmCandidate& c, const GemmProblem& p) {
  const double m = p.m, n = p.n, k = p.k, e = dtype_size(p.dtype), ce = dtype_size(result_dtype(p.dtype));
  const double P = p.ranks;
  const double own = (m * k + k * n) / P * e + m * n / P * ce;
  switch (c.algo) {
    case GemmAlgo::Summa: return own + 2.0 * 2 * c.panel * (m / c.p + n / c.q) * e;
    case GemmAlgo::Cannon: return own + 2.0 * (m * k + k * n) / P * e;
    case GemmAlgo::TwoHalfD: {
      const double s2 = double(c.p) * c.p;
      return (m * k + k * n) / s2 * e + 2 * m * n / s2 * ce + 4.0 * c.panel * (m + n) / c.p * e;
    }
    case GemmAlgo::OneD: return own + 2.0 * (c.q == 1 ? k * n : m * k) / P * e;
    case GemmAlgo::SplitK: return own + 2.0 * m * n / P * ce * 1.5;
    case GemmAlgo::Auto: break;
  }
  return own;
}

void cost(GemmCandidate& c, const GemmProblem& p) {
  const double used = c.algo == GemmAlgo::TwoHalfD ? double(c.c) * c.p * c.q : p.ranks;
  // Thin local products run below the peak rate: scale by the smallest
  // dimension each multiply sees (panels of width `panel`, 1D blocks).
  double thin = std::min<double>({double(p.m) / c.p, double(p.n) / c.q,
                                  c.algo == GemmAlgo::Summa || c.algo == GemmAlgo::TwoHalfD ? double(c.panel)
                                                                                           : double(p.k) / std::max(1, c.algo == GemmAlgo::SplitK ? p.ranks : c.p)});
  const double efficiency = std::min(1.0, std::sqrt(std::max(1.0, thin) / 256.0));
  c.local_s = 2.0 * p.m * p.n * p.k / used / (p.gflops_per_rank * 1e9 * efficiency);
  c.words_bytes = formula_bytes(c, p);
  c.messages = messages_of(c, p);
  c.comm_s = (c.messages * p.alpha_us + c.words_bytes * p.beta_us_per_byte) * 1e-6;
  // Overlapped: what exceeds the compute, plus the step no multiply covers:
  // SUMMA's first panel, Cannon's skew, split-k's last chunk; a ring's first
  // step multiplies the rank's own block, so nothing waits there.
  double uncovered = 0;
  switch (c.algo) {
    case GemmAlgo::Summa:
    case GemmAlgo::TwoHalfD: uncovered = c.comm_s / std::max(1.0, std::ceil(double(p.k) / c.panel)); break;
    case GemmAlgo::Cannon: uncovered = c.comm_s / std::max(1, c.p); break;
    case GemmAlgo::SplitK: uncovered = c.comm_s / splitk_chunks(p); break;
    default: break;
  }
  c.exposed_s = uncovered + std::max(0.0, c.comm_s - c.local_s);
  c.total_s = c.local_s + c.exposed_s;
  c.memory_bytes = memory_of(c, p);
  c.fits = p.memory_limit_bytes <= 0 || c.memory_bytes <= p.memory_limit_bytes;
}

}  // namespace

GemmPlan plan_gemm(const GemmProblem& pr) {
  MT_CHECK(pr.m > 0 && pr.n > 0 && pr.k > 0 && pr.ranks >= 1, "matmul plan: m, n, k and ranks must "
           "be positive (got {}x{}x{} on {})", pr.m, pr.n, pr.k, pr.ranks);
  const int P = pr.ranks;
  std::vector<GemmCandidate> cs;
  auto add = [&](GemmAlgo a, int p, int q, int c, int64_t panel) {
    GemmCandidate g;
    g.algo = a;
    g.p = p;
    g.q = q;
    g.c = c;
    g.panel = std::min<int64_t>(panel, pr.k);
    cost(g, pr);
    cs.push_back(g);
  };
  // SUMMA's panel width trades messages and thin multiplies (wide panels)
  // against the first panel's uncovered transfer (narrow ones).
  for (int p = 1; p <= P; ++p)
    if (P % p == 0)
      for (int64_t w : {pr.nb / 2, pr.nb, pr.nb * 2})
        if (w >= 1 && (w == pr.nb || w < pr.k)) add(GemmAlgo::Summa, p, P / p, 1, w);
  if (P > 1) {
    add(GemmAlgo::OneD, P, 1, 1, pr.nb);
    add(GemmAlgo::OneD, 1, P, 1, pr.nb);
    add(GemmAlgo::SplitK, P, 1, 1, pr.nb);
  }
  for (int s = 2; s * s <= P; ++s)
    if (s * s == P) add(GemmAlgo::Cannon, s, s, 1, pr.nb);
  for (int s = 1; s * s <= P; ++s)
    for (int c = 2; c * s * s <= P; c *= 2)
      if (c * s * s == P) add(GemmAlgo::TwoHalfD, s, s, c, pr.nb);
  std::stable_sort(cs.begin(), cs.end(), [](const GemmCandidate& a, const GemmCandidate& b) {
    if (a.fits != b.fits) return a.fits;
    return a.total_s < b.total_s;
  });
  MT_CHECK(cs.front().fits, "matmul plan: no algorithm fits {}x{}x{} {} on {} ranks in {:.0f} MiB per "
           "rank (the leanest needs {:.0f} MiB)", pr.m, pr.n, pr.k, dtype_name(pr.dtype), P,
           pr.memory_limit_bytes / 1048576, cs.front().memory_bytes / 1048576);
  return {cs.front(), cs};
}

std::string GemmPlan::explain(const GemmProblem& p) const {
  std::string s = fmt::format(
      "# plan for {}x{}x{} {} on {} ranks: local GEMM at {:.1f} GFLOP/s per rank, {:.1f} us per "
      "message, {:.2f} GB/s per rank{}\n# {:<7} {:>7} {:>6} {:>10} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9}\n",
      p.m, p.n, p.k, dtype_name(p.dtype), p.ranks, p.gflops_per_rank, p.alpha_us,
      1e-3 / p.beta_us_per_byte,
      p.memory_limit_bytes > 0 ? fmt::format(", {:.0f} MiB per rank", p.memory_limit_bytes / 1048576) : "",
      "algo", "grid", "panel", "MB/rank", "msgs", "local ms", "comm ms", "exposed", "total ms", "mem MiB");
  for (const GemmCandidate& c : candidates)
    s += fmt::format("# {:<7} {:>7} {:>6} {:>10.2f} {:>8.0f} {:>9.2f} {:>9.2f} {:>9.2f} {:>9.2f} {:>9.1f}{}\n",
                     gemm_algo_name(c.algo), c.grid(), c.panel, c.words_bytes / 1e6, c.messages,
                     c.local_s * 1e3, c.comm_s * 1e3, c.exposed_s * 1e3, c.total_s * 1e3,
                     c.memory_bytes / 1048576, c.fits ? "" : "  (over the memory limit)");
  s += fmt::format("# chose {} on {}: the least predicted time{}\n", gemm_algo_name(best.algo), best.grid(),
                   candidates.size() > 1 ? fmt::format(", {:.2f} ms before {} on {}'s {:.2f} ms",
                                                       best.total_s * 1e3, gemm_algo_name(candidates[1].algo),
                                                       candidates[1].grid(), candidates[1].total_s * 1e3)
                                         : "");
  return s;
}

}  // namespace meshtrain::linalg
