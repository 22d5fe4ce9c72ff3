// The MPI transport and the native `mpi` algorithm under a real mpirun, and
// the two-level algorithm with emulated nodes (shm inside, MPI across).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "mpirun_available.h"

namespace {

int mpirun(int n, const std::string& env, const std::string& args) {
  // Root needs --allow-run-as-root; a 2-core machine needs --oversubscribe.
  std::string cmd = "timeout 120 env " + env + " mpirun --allow-run-as-root --oversubscribe -n " +
                    std::to_string(n) + " -x MESHTRAIN_COMM_NODE_SIZE -x MESHTRAIN_COMM_TIMEOUT " +
                    COMM_CHECK_BINARY + " " + args;
  return std::system(cmd.c_str());
}

}  // namespace

TEST(comm, mpi_transport_all_algorithms) {
  MT_SKIP_WITHOUT_MPIRUN();
  EXPECT_EQ(mpirun(3, "MESHTRAIN_COMM_NODE_SIZE=0 MESHTRAIN_COMM_TIMEOUT=60", "--transport mpi"), 0);
}

TEST(comm, mpi_world_on_one_host_uses_shm) {
  MT_SKIP_WITHOUT_MPIRUN();
  EXPECT_EQ(mpirun(2, "MESHTRAIN_COMM_NODE_SIZE=0 MESHTRAIN_COMM_TIMEOUT=60", ""), 0);
}

TEST(comm, mpi_hierarchical_emulated_nodes) {
  MT_SKIP_WITHOUT_MPIRUN();
  EXPECT_EQ(mpirun(4, "MESHTRAIN_COMM_NODE_SIZE=2 MESHTRAIN_COMM_TIMEOUT=60", "--transport mpi"), 0);
}
