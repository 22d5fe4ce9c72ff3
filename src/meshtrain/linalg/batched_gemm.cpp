#include "meshtrain/linalg/batched_gemm.h"

#include <omp.h>

#include "meshtrain/core/error.h"
#include "meshtrain/kernels/kernel_table.h"

namespace meshtrain::linalg {

comm::Block batch_share(int64_t batch, int ranks, int rank) {
  return comm::block_of(static_cast<size_t>(batch), ranks, rank);
}

comm::Block grouped_share(const std::vector<GemmShape>& shapes, int ranks, int rank) {
  // Rank r takes the products whose flops prefix (at their midpoint) falls
  // in [r, r + 1) / ranks of the total: contiguous and near-equal.
  double total = 0;
  for (const GemmShape& s : shapes) total += double(s.m) * s.n * s.k;
  comm::Block b{0, 0};
  bool started = false;
  double before = 0;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const double f = double(shapes[i].m) * shapes[i].n * shapes[i].k;
    const double mid = total > 0 ? (before + f / 2) / total : double(i) / shapes.size();
    const int owner = std::min(ranks - 1, static_cast<int>(mid * ranks));
    if (owner == rank) {
      if (!started) b.offset = i;
      started = true;
      ++b.count;
    }
    before += f;
  }
  if (!started) b.offset = shapes.size();
  return b;
}

void batched_gemm_strided(const Context& ctx, bool ta, bool tb, GemmShape s, float alpha,
                          const float* A, int64_t stride_a, const float* B, int64_t stride_b,
                          float beta, float* C, int64_t stride_c, int64_t count, GemmTimes& t) {
  const auto t0 = GemmClock::now();
  ctx.kernels().sgemm_strided_batched(default_stream(ctx.device()), ta, tb, s.m, s.n, s.k, alpha, A,
                                      ta ? s.m : s.k, stride_a, B, tb ? s.k : s.n, stride_b, beta, C,
                                      s.n, stride_c, count);
  t.local_gemm_s += seconds_since(t0);
  t.multiplies += count;
}

namespace {

void run_list(const Context& ctx, bool ta, bool tb, const std::vector<GemmShape>& shapes,
              float alpha, const std::vector<GemmPointers>& products, float beta, GemmTimes& t) {
  MT_CHECK(shapes.size() == products.size() || shapes.size() == 1, "batched gemm: {} shapes for {} "
           "products", shapes.size(), products.size());
  const auto t0 = GemmClock::now();
  const KernelTable& k = ctx.kernels();
  const Stream st = default_stream(ctx.device());
  const auto n = static_cast<int64_t>(products.size());
  // On the CPU the products spread over the threads, one sgemm each.
  const int threads = ctx.device().is_cpu() ? static_cast<int>(std::min<int64_t>(omp_get_max_threads(), n)) : 1;
#pragma omp parallel for schedule(dynamic, 8) num_threads(threads) if (threads > 1)
  for (int64_t i = 0; i < n; ++i) {
    const GemmShape& s = shapes.size() == 1 ? shapes[0] : shapes[static_cast<size_t>(i)];
    const GemmPointers& p = products[static_cast<size_t>(i)];
    k.sgemm(st, ta, tb, s.m, s.n, s.k, alpha, p.A, ta ? s.m : s.k, p.B, tb ? s.k : s.n, beta, p.C, s.n);
  }
  t.local_gemm_s += seconds_since(t0);
  t.multiplies += n;
}

}  // namespace

void batched_gemm_pointers(const Context& ctx, bool ta, bool tb, GemmShape s, float alpha,
                           const std::vector<GemmPointers>& products, float beta, GemmTimes& t) {
  run_list(ctx, ta, tb, {s}, alpha, products, beta, t);
}

void batched_gemm_grouped(const Context& ctx, const std::vector<GemmShape>& shapes, float alpha,
                          const std::vector<GemmPointers>& products, float beta, GemmTimes& t) {
  run_list(ctx, false, false, shapes, alpha, products, beta, t);
}

}  // namespace meshtrain::linalg
