// test-links: mt_linalg mt_comm_testing
// Bad input to the distributed multiply is a clear error naming what is
// wrong, before anything moves: shapes that do not multiply, mixed dtypes, a
// C of the wrong dtype, an unsupported dtype, a grid larger than the job, an
// algorithm that cannot keep C's layout, an unknown algorithm name, bad
// layouts, and a planner asked to fit a problem into too little memory.
#include <gtest/gtest.h>

#include "error_of.h"
#include "harness.h"
#include "meshtrain/linalg/dist_gemm.h"
#include "meshtrain/linalg/gemm_plan.h"

using namespace meshtrain;
using namespace meshtrain::linalg;
using meshtrain::testing::error_of;

namespace {

struct One {
  Context ctx{comm::Communicator::create_local(0, 1, "linalg-errors")};
  DistMatrix make(int64_t r, int64_t c, DType t = DType::F64, int p = 1, int q = 1) {
    return DistMatrix(MatrixLayout::block(r, c, p, q), t, ctx.rank());
  }
};

}  // namespace

TEST(linalg, bad_calls_say_what_is_wrong) {
  One o;
  DistMatrix A = o.make(4, 3), B = o.make(5, 2), C = o.make(4, 2);
  EXPECT_NE(error_of([&] { gemm(o.ctx, false, false, 1, A, B, 0, C); }).find("do not multiply"), std::string::npos);
  DistMatrix Bf = o.make(3, 2, DType::F32), Cf = o.make(4, 2, DType::F32);
  EXPECT_NE(error_of([&] { gemm(o.ctx, false, false, 1, A, Bf, 0, C); }).find("must match"), std::string::npos);
  DistMatrix Ab = o.make(4, 3, DType::BF16), Bb = o.make(3, 2, DType::BF16), Cb = o.make(4, 2, DType::BF16);
  EXPECT_NE(error_of([&] { gemm(o.ctx, false, false, 1, Ab, Bb, 0, Cb); }).find("C must be F32"), std::string::npos);
  EXPECT_NE(error_of([&] { o.make(2, 2, DType::I32); }).find("not supported"), std::string::npos);
  DistMatrix B3 = o.make(3, 2), Cbig = o.make(4, 2, DType::F64, 2, 2);
  EXPECT_NE(error_of([&] { gemm(o.ctx, false, false, 1, A, B3, 0, Cbig); }).find("more than the job"),
            std::string::npos);
  GemmOptions cannon;
  cannon.algo = GemmAlgo::Cannon;
  DistMatrix Ccyc(MatrixLayout::block_cyclic(4, 4, 1, 1, 1, 1), DType::F64, 0);
  DistMatrix B4 = o.make(3, 4);
  EXPECT_EQ(error_of([&] { gemm(o.ctx, false, false, 1, A, B4, 0, Ccyc, cannon); }), "no error")
      << "a 1 x 1 grid holds any layout as one block";
  GemmOptions splitk;
  splitk.algo = GemmAlgo::SplitK;
  DistMatrix Crow = DistMatrix(MatrixLayout::block_cyclic(4, 4, 1, 1, 1, 1), DType::F64, 0);
  EXPECT_EQ(error_of([&] { gemm(o.ctx, false, false, 1, A, B4, 0, Crow, splitk); }), "no error");
  EXPECT_NE(error_of([] { gemm_algo_from_name("strassen"); }).find("strassen"), std::string::npos);
  EXPECT_NE(error_of([] { MatrixLayout::block_cyclic(4, 4, 0, 1, 1, 1); }).find("block"), std::string::npos);
  EXPECT_NE(error_of([] { MatrixLayout::block(4, 4, 0, 1); }).find("grid"), std::string::npos);
  GemmProblem pr;
  pr.m = pr.n = pr.k = 4096;
  pr.ranks = 2;
  pr.memory_limit_bytes = 1 << 20;
  EXPECT_NE(error_of([&] { plan_gemm(pr); }).find("no algorithm fits"), std::string::npos);
  pr.memory_limit_bytes = 0;
  pr.k = 0;
  EXPECT_NE(error_of([&] { plan_gemm(pr); }).find("must be positive"), std::string::npos);
}

TEST(linalg, an_algorithm_that_cannot_keep_c_in_place_is_refused_on_two_ranks) {
  auto w = comm::testing::run_world(2, [](comm::Communicator& world) {
    Context ctx(world);
    // C cyclic on 1 x 2: Cannon wants a square grid in blocks.
    DistMatrix A(MatrixLayout::block(6, 4, 1, 2), DType::F64, ctx.rank());
    DistMatrix B(MatrixLayout::block(4, 6, 1, 2), DType::F64, ctx.rank());
    DistMatrix C(MatrixLayout::block_cyclic(6, 6, 2, 2, 1, 2), DType::F64, ctx.rank());
    GemmOptions o;
    o.algo = GemmAlgo::Cannon;
    const std::string e = error_of([&] { gemm(ctx, false, false, 1, A, B, 0, C, o); });
    return e.find("cannon cannot keep C in its layout") != std::string::npos ? "" : "got: " + e;
  });
  EXPECT_TRUE(w.ok()) << w.report();
}
