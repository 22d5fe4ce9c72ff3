// test-links: mt_linalg mt_comm_testing mt_linalg_testing
// The distributed matrix multiply between real processes over the shm
// transport: every algorithm x dtype x transpose on odd shapes (m, n, k not
// multiples of the grid or the blocks, k below the block, 1 x P and P x 1
// grids, operands in other layouts) equals a single-rank product within the
// error bound of tests/linalg/linalg_cases.h, on 1-4, 8 and 9 ranks (the
// last two oversubscribed). linalg_mpi_test runs the same matrix over MPI.
#include <gtest/gtest.h>

#include "harness.h"
#include "linalg_cases.h"

using namespace meshtrain;
using comm::Communicator;
using comm::testing::run_world;

namespace {

void run_all(int P) {
  auto w = run_world(P, [](Communicator& world) {
    linalg::Context ctx(world);
    return linalg::testing::check_all(ctx);
  }, comm::CommOptions::from_env(), 300);
  EXPECT_TRUE(w.ok()) << w.report();
}

}  // namespace

TEST(linalg, every_algorithm_matches_one_rank_on_1_rank) { run_all(1); }
TEST(linalg, every_algorithm_matches_one_rank_on_2_ranks) { run_all(2); }
TEST(linalg, every_algorithm_matches_one_rank_on_3_ranks) { run_all(3); }
TEST(linalg, every_algorithm_matches_one_rank_on_4_ranks) { run_all(4); }
TEST(linalg, every_algorithm_matches_one_rank_on_8_ranks_oversubscribed) { run_all(8); }
TEST(linalg, every_algorithm_matches_one_rank_on_9_ranks_oversubscribed) { run_all(9); }
