// `meshtrain bench matmul`: the distributed matrix multiply (linalg/) on the
// ranks of a job. Prints GFLOP/s, its share of P x the single-rank rate,
// words and messages per rank beside the algorithm's formula and the 2D
// bound, the time split into local GEMM, exposed and (by the α-β model)
// hidden communication, and the scaled error of sampled entries on every
// run. `--batch N` times N independent m x n x k multiplies split over the
// ranks against rank 0 running them all alone (interleaved, run by run) and
// against a loop of single distributed calls.
// Started outside a job with -n N it measures the single-rank rate, then
// launches N ranks of itself. The ScaLAPACK peer runs beside it through
// bench/matmul_vs_pdgemm.py.
#include <unistd.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <vector>

#include "commands.h"
#include "meshtrain/comm/communicator.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/half.h"
#include "meshtrain/core/tensor.h"
#include "meshtrain/kernels/kernel_table.h"
#include "meshtrain/launch/launcher.h"
#include "meshtrain/linalg/batched_gemm.h"
#include "meshtrain/linalg/dist_gemm.h"
#include "meshtrain/linalg/gemm_plan.h"
#include "meshtrain/linalg/matrix_values.h"

namespace meshtrain::cli {

namespace matmul_bench {

using namespace meshtrain::linalg;

struct Options {
  std::string algo = "auto", grid, dtype = "f64";
  int64_t m = 2048, n = 2048, k = 2048, nb = 256, panel = 0, batch = 0;
  int lookahead = 1, warmup = 1, iters = 5, nproc = 0;
  double memory_mib = 0, single_gflops = 0;
  bool json = false, explain = false;
};

// The single-rank rate of the whole product: one local GEMM, median of 3.
double single_rank_gflops(const Options& o, DType dt) {
  Context ctx(comm::Communicator::create_local(0, 1, "matmul-single"));
  const int64_t m = o.m, n = o.n, k = o.k;
  Tensor a = Tensor::zeros({m * k}, dt), b = Tensor::zeros({k * n}, dt), c = Tensor::zeros({m * n}, result_dtype(dt));
  std::vector<double> runs;
  GemmTimes t;
  for (int i = 0; i < 4; ++i) {
    const auto t0 = GemmClock::now();
    local_gemm(ctx, dt, false, false, m, n, k, 1.0, a.raw(), k, b.raw(), n, 0.0, c.raw(), n, t);
    if (i > 0) runs.push_back(seconds_since(t0));
  }
  std::sort(runs.begin(), runs.end());
  return 2.0 * m * n * k / runs[1] / 1e9;
}

struct Shape3 {
  int p = 0, q = 0, c = 1;
};
Shape3 parse_grid(const std::string& s) {
  Shape3 g;
  if (s.empty()) return g;
  if (std::sscanf(s.c_str(), "%dx%dx%d", &g.p, &g.q, &g.c) < 2 || g.p < 1 || g.q < 1 || g.c < 1)
    throw UsageError(fmt::format("--grid '{}': expected PxQ or PxQxC with positive sides (e.g. 2x2)", s));
  return g;
}

GemmCandidate pick(const Options& o, const GemmProblem& pr, GemmAlgo algo, std::string& why) {
  const GemmPlan plan = plan_gemm(pr);
  const Shape3 g = parse_grid(o.grid);
  if (g.p > 0 && g.p * g.q * g.c != pr.ranks)
    throw UsageError(fmt::format("--grid {} has {} ranks; the job has {}", o.grid, g.p * g.q * g.c, pr.ranks));
  for (const GemmCandidate& c : plan.candidates) {
    if (algo != GemmAlgo::Auto && c.algo != algo) continue;
    if (g.p > 0 && (c.p != g.p || c.q != g.q || c.c != g.c)) continue;
    why = o.explain ? plan.explain(pr) : "";
    return c;
  }
  // Not among the planner's candidates (a 2.5D grid it would not pick): as asked.
  MT_CHECK(g.p > 0 && algo != GemmAlgo::Auto, "bench matmul: {} has no grid for {} ranks{}",
           gemm_algo_name(algo), pr.ranks, o.grid.empty() ? "" : " on " + o.grid);
  GemmCandidate c;
  c.algo = algo;
  c.p = g.p;
  c.q = g.q;
  c.c = g.c;
  c.panel = std::min(pr.nb, pr.k);
  why = o.explain ? plan.explain(pr) : "";
  return c;
}

// max |C - C_ref| / (k eps max|A| max|B|) over 64 sampled entries (every rank
// samples the same ones; owners compare), the largest over the ranks.
double sampled_error(Context& ctx, const DistMatrix& C, int64_t k, DType dt) {
  const MatrixLayout& l = C.layout();
  auto operand = [dt](uint64_t seed, int64_t i, int64_t j) {
    const double v = matrix_value(seed, i, j);
    if (dt == DType::BF16) return static_cast<double>(bf16_to_f32(f32_to_bf16(static_cast<float>(v))));
    if (dt == DType::F32) return static_cast<double>(static_cast<float>(v));
    return v;
  };
  double worst = 0;
  for (int s = 0; s < 64; ++s) {
    const int64_t i = static_cast<int64_t>(splitmix64(1000 + s) % static_cast<uint64_t>(l.rows));
    const int64_t j = static_cast<int64_t>(splitmix64(5000 + s) % static_cast<uint64_t>(l.cols));
    if (!C.on_grid() || l.owner_row(i) != C.prow() || l.owner_col(j) != C.pcol()) continue;
    long double want = 0;
    for (int64_t x = 0; x < k; ++x) want += static_cast<long double>(operand(1, i, x)) * operand(2, x, j);
    const double got = C.get_local(l.local_row(i), l.local_col(j));
    worst = std::max(worst, static_cast<double>(std::fabs(want - got)));
  }
  const double eps = result_dtype(dt) == DType::F64 ? DBL_EPSILON : FLT_EPSILON;
  double e = worst / (static_cast<double>(k) * eps);  // |A|, |B| <= 1
  if (ctx.size() > 1) e = ctx.world().allreduce_scalar(e, comm::ReduceOp::Max);
  return e;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void run_dense(const Options& o, Context& ctx) {
  const DType dt = dtype_from_name(o.dtype);
  check_gemm_dtype(dt);
  const int P = ctx.size();
  GemmProblem pr;
  pr.m = o.m;
  pr.n = o.n;
  pr.k = o.k;
  pr.ranks = P;
  pr.dtype = dt;
  pr.nb = o.nb;
  pr.memory_limit_bytes = o.memory_mib * 1048576;
  pr.gflops_per_rank = o.single_gflops > 0 ? o.single_gflops : 50;
  const comm::AlphaBeta ab = ctx.world().cost_model().get(ctx.world().transport(), "ring");
  pr.alpha_us = ab.alpha_us;
  pr.beta_us_per_byte = ab.beta_us_per_byte;
  std::string why;
  const GemmCandidate cand = pick(o, pr, gemm_algo_from_name(o.algo), why);
  const int64_t panel = o.panel > 0 ? o.panel : cand.panel;
  GemmCandidate laid = cand;
  laid.panel = panel;
  const MatrixLayout cl = laid.c_layout(o.m, o.n);
  auto [la, lb] = gemm_operand_layouts(cand.algo, cl, o.k, panel);
  DistMatrix A(la, dt, ctx.rank()), B(lb, dt, ctx.rank()), C(cl, result_dtype(dt), ctx.rank());
  A.fill([](int64_t i, int64_t j) { return matrix_value(1, i, j); });
  B.fill([](int64_t i, int64_t j) { return matrix_value(2, i, j); });
  GemmOptions go;
  go.algo = cand.algo;
  go.panel = o.panel;
  go.lookahead = o.lookahead;
  go.layers = cand.c;
  std::vector<double> total, local, exposed, pack;
  GemmResult last;
  double err = 0;
  for (int it = 0; it < o.warmup + o.iters; ++it) {
    ctx.world().barrier().wait();
    last = gemm(ctx, false, false, 1.0, A, B, 0.0, C, go);
    double t = last.times.total_s;
    if (P > 1) t = ctx.world().allreduce_scalar(t, comm::ReduceOp::Max);
    err = std::max(err, sampled_error(ctx, C, o.k, dt));
    if (it < o.warmup) continue;
    total.push_back(t);
    local.push_back(last.times.local_gemm_s);
    exposed.push_back(last.times.wait_s);
    pack.push_back(last.times.pack_s);
  }
  // The busiest rank's traffic (Cannon's skew, uneven blocks): what bounds count.
  double words_bytes = last.traffic.bytes, messages = static_cast<double>(last.traffic.messages);
  if (P > 1) {
    words_bytes = ctx.world().allreduce_scalar(words_bytes, comm::ReduceOp::Max);
    messages = ctx.world().allreduce_scalar(messages, comm::ReduceOp::Max);
  }
  if (ctx.rank() != 0) return;
  const double t = median(total), flops = 2.0 * o.m * o.n * o.k;
  const double gf = flops / t / 1e9;
  const double esz = dtype_size(dt);
  const double words = words_bytes / esz, formula = formula_bytes(laid, pr) / esz;
  const double bound2d = (double(o.m) * o.k + double(o.k) * o.n) / std::sqrt(double(P));
  const double comm_model = (messages * pr.alpha_us + words_bytes * pr.beta_us_per_byte) * 1e-6;
  const double hidden = std::max(0.0, comm_model - median(exposed));
  const double pct = o.single_gflops > 0 ? 100.0 * gf / (P * o.single_gflops) : 0;
  if (!why.empty()) std::printf("%s", why.c_str());
  if (o.json) {
    nlohmann::json j = {{"bench", "matmul"}, {"algo", gemm_algo_name(cand.algo)}, {"grid", cand.grid()},
                        {"m", o.m}, {"n", o.n}, {"k", o.k}, {"nb", o.nb}, {"panel", panel},
                        {"lookahead", o.lookahead}, {"dtype", o.dtype}, {"ranks", P},
                        {"time_ms_median", t * 1e3}, {"time_ms_min", *std::min_element(total.begin(), total.end()) * 1e3},
                        {"gflops", gf}, {"single_rank_gflops", o.single_gflops}, {"pct_of_P_single", pct},
                        {"words_per_rank", words}, {"formula_words", formula}, {"bound_2d_words", bound2d},
                        {"messages", messages}, {"local_gemm_ms", median(local) * 1e3},
                        {"exposed_comm_ms", median(exposed) * 1e3}, {"hidden_comm_ms_model", hidden * 1e3},
                        {"pack_ms", median(pack) * 1e3}, {"multiplies", last.times.multiplies},
                        {"overlapped", last.times.overlapped}, {"error", err}, {"error_ok", err < 1.0}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("matmul %s on %s: %lldx%lldx%lld %s, panel %lld, look-ahead %d, %d ranks\n",
                std::string(gemm_algo_name(cand.algo)).c_str(), cand.grid().c_str(), (long long)o.m,
                (long long)o.n, (long long)o.k, o.dtype.c_str(), (long long)panel, o.lookahead, P);
    std::printf("  time %.2f ms (median of %d), %.1f GFLOP/s, %.0f%% of %d x the single-rank %.1f GFLOP/s\n",
                t * 1e3, o.iters, gf, pct, P, o.single_gflops);
    std::printf("  words per rank %.0f (the busiest; formula %.0f, 2D (mk+kn)/sqrt(P) %.0f), messages %.0f\n",
                words, formula, bound2d, messages);
    std::printf("  rank 0: local GEMM %.2f ms, exposed communication %.2f ms, hidden (alpha-beta model) "
                "%.2f ms, packing %.2f ms; %lld of %lld multiplies overlapped a transfer\n",
                median(local) * 1e3, median(exposed) * 1e3, hidden * 1e3, median(pack) * 1e3,
                static_cast<long long>(last.times.overlapped), static_cast<long long>(last.times.multiplies));
    std::printf("  error %.3g x k eps |A| |B| (sampled, every run): %s\n", err, err < 1.0 ? "ok" : "TOO LARGE");
  }
  std::fflush(stdout);
  if (!(err < 1.0)) throw Error(fmt::format("bench matmul: error {:.3g} above the bound", err));
}

void run_batched(const Options& o, Context& ctx) {
  MT_CHECK(o.dtype == "f32", "bench matmul --batch: f32 only (got {})", o.dtype);
  const int P = ctx.size(), r = ctx.rank();
  const GemmShape s{o.m, o.n, o.k};
  const comm::Block share = batch_share(o.batch, P, r);
  const int64_t sa = s.m * s.k, sb = s.k * s.n, sc = s.m * s.n, cnt = static_cast<int64_t>(share.count);
  std::vector<float> A(static_cast<size_t>(std::max<int64_t>(1, cnt * sa))), B(static_cast<size_t>(std::max<int64_t>(1, cnt * sb))),
      C(static_cast<size_t>(std::max<int64_t>(1, cnt * sc)));
  for (size_t i = 0; i < A.size(); ++i) A[i] = static_cast<float>(matrix_value(7, static_cast<int64_t>(share.offset), static_cast<int64_t>(i)));
  for (size_t i = 0; i < B.size(); ++i) B[i] = static_cast<float>(matrix_value(8, static_cast<int64_t>(share.offset), static_cast<int64_t>(i)));
  // One rank running the whole batch, interleaved with the split runs (the
  // other ranks wait at a barrier meanwhile): the same conditions for both.
  std::vector<float> A1, B1, C1;
  if (r == 0) {
    A1.assign(static_cast<size_t>(o.batch * sa), 0.5f);
    B1.assign(static_cast<size_t>(o.batch * sb), 0.25f);
    C1.assign(static_cast<size_t>(o.batch * sc), 0.f);
  }
  std::vector<double> batched, alone;
  for (int it = 0; it < o.warmup + o.iters; ++it) {
    GemmTimes t;
    ctx.world().barrier().wait();
    const auto t0 = GemmClock::now();
    batched_gemm_strided(ctx, false, false, s, 1.f, A.data(), sa, B.data(), sb, 0.f, C.data(), sc, cnt, t);
    double el = seconds_since(t0);
    if (P > 1) el = ctx.world().allreduce_scalar(el, comm::ReduceOp::Max);
    ctx.world().barrier().wait();
    if (r == 0) {
      const auto t1 = GemmClock::now();
      batched_gemm_strided(ctx, false, false, s, 1.f, A1.data(), sa, B1.data(), sb, 0.f, C1.data(), sc, o.batch, t);
      if (it >= o.warmup) alone.push_back(seconds_since(t1));
    }
    if (it >= o.warmup) batched.push_back(el);
  }
  // The same multiplies as single distributed calls (each a 1 x P SUMMA over
  // all ranks, the way a caller without a batched API would run them).
  const int64_t loop_n = std::min<int64_t>(o.batch, 1000);
  const MatrixLayout cl = MatrixLayout::block(s.m, s.n, 1, P);
  auto [la, lb] = gemm_operand_layouts(GemmAlgo::Summa, cl, s.k, 0);
  DistMatrix dA(la, DType::F32, r), dB(lb, DType::F32, r), dC(cl, DType::F32, r);
  dA.fill([](int64_t i, int64_t j) { return matrix_value(7, i, j); });
  dB.fill([](int64_t i, int64_t j) { return matrix_value(8, i, j); });
  GemmOptions go;
  go.algo = GemmAlgo::Summa;
  ctx.world().barrier().wait();
  const auto l0 = GemmClock::now();
  for (int64_t i = 0; i < loop_n; ++i) gemm(ctx, false, false, 1.0, dA, dB, 0.0, dC, go);
  double loop_s = seconds_since(l0) * static_cast<double>(o.batch) / static_cast<double>(loop_n);
  if (P > 1) loop_s = ctx.world().allreduce_scalar(loop_s, comm::ReduceOp::Max);
  if (r != 0) return;
  const double t = median(batched), one = median(alone), flops = 2.0 * s.m * s.n * s.k * o.batch;
  nlohmann::json j = {{"bench", "matmul-batched"}, {"m", s.m}, {"n", s.n}, {"k", s.k}, {"batch", o.batch},
                      {"ranks", P}, {"time_ms_median", t * 1e3}, {"gflops", flops / t / 1e9},
                      {"single_rank_ms", one * 1e3}, {"speedup_vs_one_rank", one / t},
                      {"loop_of_distributed_calls_ms", loop_s * 1e3}, {"loop_calls_timed", loop_n},
                      {"speedup_vs_loop", loop_s / t}, {"messages", 0}};
  if (o.json) {
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("batched matmul: %lld x (%lldx%lldx%lld) f32 on %d ranks: %.2f ms (median), %.1f GFLOP/s\n"
                "  one rank alone (interleaved): %.2f ms (%.2fx); a loop of single distributed calls: %.1f ms "
                "(%.1fx, %lld timed)\n",
                (long long)o.batch, (long long)s.m, (long long)s.n, (long long)s.k, P, t * 1e3, flops / t / 1e9,
                j["single_rank_ms"].get<double>(), j["speedup_vs_one_rank"].get<double>(), loop_s * 1e3,
                loop_s / t, (long long)loop_n);
  }
  std::fflush(stdout);
}

}  // namespace matmul_bench

void register_bench_matmul(CLI::App& bench) {
  using matmul_bench::Options;
  auto* cmd = bench.add_subcommand("matmul", "Distributed matrix multiply: GFLOP/s, words moved, error (linalg/)");
  auto o = std::make_shared<Options>();
  cmd->add_option("--algo", o->algo, "auto, 1d, summa, cannon, 2.5d, splitk")->capture_default_str();
  cmd->add_option("--m", o->m, "Rows of A and C")->capture_default_str();
  cmd->add_option("--n", o->n, "Columns of B and C")->capture_default_str();
  cmd->add_option("--k", o->k, "Columns of A, rows of B")->capture_default_str();
  cmd->add_option("--grid", o->grid, "Process grid PxQ or PxQxC (2.5D layers); default: the planner's");
  cmd->add_option("--nb", o->nb, "Block size (SUMMA/2.5D layouts and panels)")->capture_default_str();
  cmd->add_option("--panel", o->panel, "k-panel width (SUMMA, 2.5D) or row chunk (split-k); 0: nb");
  cmd->add_option("--lookahead", o->lookahead, "Panels in flight during a multiply")->capture_default_str();
  cmd->add_option("--dtype", o->dtype, "f64, f32, bf16 (f32 accumulation)")->capture_default_str();
  cmd->add_option("--batch", o->batch, "Time this many independent m x n x k f32 multiplies instead");
  cmd->add_option("--memory-mib", o->memory_mib, "Memory limit per rank for the planner (MiB)");
  cmd->add_option("-w,--warmup", o->warmup, "Untimed runs")->capture_default_str();
  cmd->add_option("--iters", o->iters, "Timed runs (median reported)")->capture_default_str();
  cmd->add_option("-n,--nproc", o->nproc, "Launch this many ranks (outside a launched job)");
  cmd->add_option("--single-gflops", o->single_gflops, "The single-rank rate (set by the launching process)");
  cmd->add_flag("--json", o->json, "One JSON object");
  cmd->add_flag("--explain", o->explain, "Print the planner's candidates and why it chose");
  cmd->callback([o] {
    MT_CHECK(o->m > 0 && o->n > 0 && o->k > 0, "bench matmul: --m, --n and --k must be positive");
    MT_CHECK(o->iters > 0 && o->warmup >= 0 && o->nb > 0 && o->lookahead >= 0 && o->batch >= 0,
             "bench matmul: --iters and --nb must be positive; --warmup, --lookahead, --batch not negative");
    linalg::gemm_algo_from_name(o->algo);  // a wrong name fails before anything launches
    matmul_bench::parse_grid(o->grid);
    const DType dt = dtype_from_name(o->dtype);
    linalg::check_gemm_dtype(dt);
    MT_CHECK(o->batch == 0 || dt == DType::F32, "bench matmul --batch: f32 only (got {})", o->dtype);
    const bool in_job = std::getenv("MESHTRAIN_RANK") || std::getenv("OMPI_COMM_WORLD_RANK");
    if (!in_job && o->single_gflops <= 0 && o->batch == 0)
      o->single_gflops = matmul_bench::single_rank_gflops(*o, dt);
    if (o->nproc > 0 && !in_job) {
      launch::LaunchOptions lo;
      lo.nproc = o->nproc;
      lo.prefix_output = false;
      char self[4096];
      ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
      lo.command = {len > 0 ? std::string(self, static_cast<size_t>(len)) : "/proc/self/exe", "bench", "matmul",
                    "--algo", o->algo, "--m", std::to_string(o->m), "--n", std::to_string(o->n), "--k",
                    std::to_string(o->k), "--nb", std::to_string(o->nb), "--panel", std::to_string(o->panel),
                    "--lookahead", std::to_string(o->lookahead), "--dtype", o->dtype, "--batch",
                    std::to_string(o->batch), "-w", std::to_string(o->warmup), "--iters", std::to_string(o->iters),
                    "--single-gflops", fmt::format("{}", o->single_gflops), "--memory-mib",
                    fmt::format("{}", o->memory_mib)};
      if (!o->grid.empty()) lo.command.insert(lo.command.end(), {"--grid", o->grid});
      if (o->json) lo.command.push_back("--json");
      if (o->explain) lo.command.push_back("--explain");
      auto r = launch::run_local(lo);
      if (r.exit_code != 0) throw Error(r.message);
      return;
    }
    linalg::Context ctx(comm::Communicator::from_env());
    if (o->batch > 0)
      matmul_bench::run_batched(*o, ctx);
    else
      matmul_bench::run_dense(*o, ctx);
  });
}

}  // namespace meshtrain::cli
