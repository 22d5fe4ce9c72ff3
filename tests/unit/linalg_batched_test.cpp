// test-links: mt_linalg mt_comm_testing
// The kernel table's general GEMM entries (dgemm, gemm_half, sgemm_strided_
// batched, copy_2d) against naive loops, transposes and leading dimensions
// included; the batch partitions (every product exactly once, contiguous,
// balanced by count or flops); and a strided, a pointer-array and a grouped
// batch split over 3 real processes equal to the same batch on one.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "harness.h"
#include "meshtrain/core/half.h"
#include "meshtrain/kernels/kernel_table.h"
#include "meshtrain/linalg/batched_gemm.h"
#include "meshtrain/linalg/matrix_values.h"

using namespace meshtrain;
using namespace meshtrain::linalg;

namespace {

template <typename T>
std::vector<T> values(uint64_t seed, int64_t n) {
  std::vector<T> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<T>(matrix_value(seed, 0, i));
  return v;
}

// C = alpha op(A) op(B) + beta C, naive, row-major with leading dimensions.
template <typename T>
void naive(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const T* A, int64_t lda,
           const T* B, int64_t ldb, double beta, std::vector<double>& C, int64_t ldc) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      long double s = 0;
      for (int64_t l = 0; l < K; ++l)
        s += static_cast<long double>(ta ? A[l * lda + i] : A[i * lda + l]) * (tb ? B[j * ldb + l] : B[l * ldb + j]);
      C[static_cast<size_t>(i * ldc + j)] = static_cast<double>(alpha * s + beta * C[static_cast<size_t>(i * ldc + j)]);
    }
}

}  // namespace

TEST(linalg, dgemm_entry_matches_naive_with_transposes_and_leading_dimensions) {
  const KernelTable& k = kernels_for(Device::cpu());
  const int64_t M = 13, N = 7, K = 9, pad = 3;
  for (int t = 0; t < 4; ++t) {
    const bool ta = t & 1, tb = t & 2;
    const int64_t lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
    auto A = values<double>(1, (ta ? K : M) * lda), B = values<double>(2, (tb ? N : K) * ldb);
    auto C = values<double>(3, M * ldc);
    std::vector<double> want(C.begin(), C.end());
    naive(ta, tb, M, N, K, 1.5, A.data(), lda, B.data(), ldb, -0.5, want, ldc);
    k.dgemm(Stream{}, ta, tb, M, N, K, 1.5, A.data(), lda, B.data(), ldb, -0.5, C.data(), ldc);
    for (int64_t i = 0; i < M; ++i)
      // f64 sums of K = 9 products below 1 in another order: ~K ulp, far under 1e-13.
      for (int64_t j = 0; j < N; ++j) EXPECT_NEAR(C[i * ldc + j], want[i * ldc + j], 1e-13) << t;
  }
}

TEST(linalg, gemm_half_entry_equals_f32_product_of_the_rounded_operands) {
  const KernelTable& k = kernels_for(Device::cpu());
  const int64_t M = 17, N = 11, K = 33;
  auto Af = values<float>(4, M * K), Bf = values<float>(5, N * K);  // B transposed: (N, K)
  std::vector<uint16_t> A(Af.size()), B(Bf.size());
  for (size_t i = 0; i < A.size(); ++i) A[i] = f32_to_bf16(Af[i]);
  for (size_t i = 0; i < B.size(); ++i) B[i] = f32_to_bf16(Bf[i]);
  std::vector<float> ar(A.size()), br(B.size());
  for (size_t i = 0; i < A.size(); ++i) ar[i] = bf16_to_f32(A[i]);
  for (size_t i = 0; i < B.size(); ++i) br[i] = bf16_to_f32(B[i]);
  std::vector<float> C(static_cast<size_t>(M * N), 1.f);
  std::vector<double> want(C.begin(), C.end());
  naive(false, true, M, N, K, 2.0, ar.data(), K, br.data(), K, 1.0, want, N);
  k.gemm_half(Stream{}, HalfFormat::BF16, false, true, M, N, K, 2.f, A.data(), K, B.data(), K, 1.f, C.data(), N);
  // Both sides multiply the same rounded operands; f32 accumulation of K terms
  // below 1 in another order (oneDNN's blocking) differs by ~K f32 ulp (1.2e-7).
  for (size_t i = 0; i < C.size(); ++i) EXPECT_NEAR(C[i], want[i], 2e-5 * K) << i;
}

TEST(linalg, strided_batched_entry_equals_one_product_at_a_time) {
  const KernelTable& k = kernels_for(Device::cpu());
  const int64_t M = 5, N = 6, K = 7, batch = 37, sa = M * K + 2, sb = K * N + 1, sc = M * N + 3;
  auto A = values<float>(6, batch * sa), B = values<float>(7, batch * sb);
  auto C = values<float>(8, batch * sc);
  std::vector<double> want(C.begin(), C.end());
  for (int64_t b = 0; b < batch; ++b) {
    std::vector<double> one(want.begin() + b * sc, want.begin() + b * sc + M * N);
    naive(true, false, M, N, K, 1.0, A.data() + b * sa, M, B.data() + b * sb, N, 0.25, one, N);
    std::copy(one.begin(), one.end(), want.begin() + b * sc);
  }
  k.sgemm_strided_batched(Stream{}, true, false, M, N, K, 1.f, A.data(), M, sa, B.data(), N, sb, 0.25f,
                          C.data(), N, sc, batch);
  for (int64_t b = 0; b < batch; ++b)
    // f32 sums of K = 7 products below 1 against long double: a few f32 ulp.
    for (int64_t i = 0; i < M * N; ++i) EXPECT_NEAR(C[b * sc + i], want[b * sc + i], 1e-5);
}

TEST(linalg, copy_2d_entry_copies_pitched_rows) {
  const KernelTable& k = kernels_for(Device::cpu());
  std::vector<char> src(10 * 16), dst(10 * 7, 0);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<char>(i);
  k.copy_2d(Stream{}, dst.data(), 7, src.data() + 3, 16, 5, 10);
  for (int r = 0; r < 10; ++r)
    for (int c = 0; c < 7; ++c) EXPECT_EQ(dst[r * 7 + c], c < 5 ? src[r * 16 + 3 + c] : 0);
}

TEST(linalg, batch_shares_cover_every_product_once_and_balance) {
  for (int64_t batch : {0, 1, 7, 10000})
    for (int P : {1, 2, 3, 8}) {
      size_t next = 0;
      for (int r = 0; r < P; ++r) {
        const comm::Block b = batch_share(batch, P, r);
        EXPECT_EQ(b.offset, next);
        EXPECT_LE(b.count, static_cast<size_t>(batch / P + 1));
        next += b.count;
      }
      EXPECT_EQ(next, static_cast<size_t>(batch));
    }
  // Mixed shapes: one big product and many small ones; flops near-equal.
  std::vector<GemmShape> shapes{{256, 256, 256}};
  for (int i = 0; i < 512; ++i) shapes.push_back({64, 64, 64 + i % 3});
  double total = 0;
  for (const auto& s : shapes) total += double(s.m) * s.n * s.k;
  for (int P : {2, 3}) {
    size_t next = 0;
    for (int r = 0; r < P; ++r) {
      const comm::Block b = grouped_share(shapes, P, r);
      EXPECT_EQ(b.offset, next);
      double f = 0;
      for (size_t i = b.offset; i < b.offset + b.count; ++i) f += double(shapes[i].m) * shapes[i].n * shapes[i].k;
      // Contiguous ranges can miss an equal split by at most one product's
      // share; the big one is 4% of the flops here.
      EXPECT_NEAR(f / total, 1.0 / P, 0.05) << "rank " << r << " of " << P;
      next += b.count;
    }
    EXPECT_EQ(next, shapes.size());
  }
}

TEST(linalg, batches_split_over_3_processes_equal_one_process) {
  auto w = comm::testing::run_world(3, [](comm::Communicator& world) {
    Context ctx(world);
    const int P = ctx.size(), r = ctx.rank();
    const GemmShape s{9, 8, 7};
    const int64_t batch = 50, sa = s.m * s.k, sb = s.k * s.n, sc = s.m * s.n;
    auto A = values<float>(20, batch * sa), B = values<float>(21, batch * sb);
    std::vector<float> mine(static_cast<size_t>(batch * sc), 0.f), all(mine.size(), 0.f);
    GemmTimes t;
    const comm::Block b = batch_share(batch, P, r);
    const auto off = static_cast<int64_t>(b.offset);
    batched_gemm_strided(ctx, false, false, s, 1.f, A.data() + off * sa, sa, B.data() + off * sb, sb, 0.f,
                         mine.data() + off * sc, sc, static_cast<int64_t>(b.count), t);
    // Pointer-array and grouped (mixed shapes) shares too, each into its own region.
    std::vector<float> ptr_out(mine.size(), 0.f), ptr_all(mine.size(), 0.f);
    std::vector<GemmPointers> ptrs;
    for (size_t i = b.offset; i < b.offset + b.count; ++i)
      ptrs.push_back({A.data() + i * sa, B.data() + i * sb, ptr_out.data() + i * sc});
    batched_gemm_pointers(ctx, false, false, s, 1.f, ptrs, 0.f, t);
    std::vector<GemmShape> shapes;
    for (int i = 0; i < batch; ++i) shapes.push_back({1 + i % 9, 1 + i % 8, 7});
    const comm::Block g = grouped_share(shapes, P, r);
    std::vector<float> grp_out(mine.size(), 0.f), grp_all(mine.size(), 0.f);
    std::vector<GemmShape> gs;
    std::vector<GemmPointers> gp;
    for (size_t i = g.offset; i < g.offset + g.count; ++i) {
      gs.push_back(shapes[i]);
      gp.push_back({A.data() + i * sa, B.data() + i * sb, grp_out.data() + i * sc});
    }
    batched_gemm_grouped(ctx, gs, 1.f, gp, 0.f, t);
    world.allreduce(mine.data(), all.data(), mine.size(), DType::F32).wait();
    world.allreduce(ptr_out.data(), ptr_all.data(), mine.size(), DType::F32).wait();
    world.allreduce(grp_out.data(), grp_all.data(), mine.size(), DType::F32).wait();
    std::string e;
    for (int64_t i = 0; i < batch && e.empty(); ++i) {
      std::vector<double> want(static_cast<size_t>(sc), 0.0), want_g(static_cast<size_t>(sc), 0.0);
      naive(false, false, s.m, s.n, s.k, 1.0, A.data() + i * sa, s.k, B.data() + i * sb, s.n, 0.0, want, s.n);
      const GemmShape& gsh = shapes[static_cast<size_t>(i)];
      naive(false, false, gsh.m, gsh.n, gsh.k, 1.0, A.data() + i * sa, gsh.k, B.data() + i * sb, gsh.n, 0.0,
            want_g, gsh.n);
      for (int64_t j = 0; j < sc; ++j) {
        if (std::abs(all[i * sc + j] - want[j]) > 1e-5 || std::abs(ptr_all[i * sc + j] - want[j]) > 1e-5)
          e = "strided or pointer-array product " + std::to_string(i) + " differs";
        if (j < gsh.m * gsh.n && std::abs(grp_all[i * sc + j] - want_g[j]) > 1e-5)
          e = "grouped product " + std::to_string(i) + " differs";
      }
    }
    return e;
  });
  EXPECT_TRUE(w.ok()) << w.report();
}
