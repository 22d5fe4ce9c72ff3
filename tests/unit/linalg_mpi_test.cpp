// test-links: mt_linalg
// The distributed multiply's whole check matrix (tests/linalg/linalg_cases.h:
// every algorithm x dtype x transpose on odd shapes) over the MPI transport
// under a real mpirun, on 4 ranks and on 9 (oversubscribed).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "mpirun_available.h"

namespace {

int mpirun(int n) {
  // Root needs --allow-run-as-root; a 2-core machine needs --oversubscribe.
  const std::string cmd = "timeout 300 env MESHTRAIN_COMM_TIMEOUT=120 mpirun --allow-run-as-root --oversubscribe -n " +
                          std::to_string(n) + " -x MESHTRAIN_COMM_TIMEOUT " + LINALG_CHECK_BINARY + " --transport mpi";
  return std::system(cmd.c_str());
}

}  // namespace

TEST(linalg, every_algorithm_over_mpi_on_4_ranks) {
  MT_SKIP_WITHOUT_MPIRUN();
  EXPECT_EQ(mpirun(4), 0);
}

TEST(linalg, every_algorithm_over_mpi_on_9_ranks_oversubscribed) {
  MT_SKIP_WITHOUT_MPIRUN();
  EXPECT_EQ(mpirun(9), 0);
}
