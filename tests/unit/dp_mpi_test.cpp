// Data-parallel training under mpirun: the ranks come from MPI's environment
// (Communicator::from_env) and the result must equal one rank with the whole
// batch, over the MPI transport and over shared memory between MPI ranks.
// Same tolerances as dp_equivalence_mp_test (1e-5 on losses, 5e-5 on
// parameters; why: dp_harness.h): MPI changes the transport, not the sums.
#include "dp_harness.h"
#include "mpirun_available.h"

#include <fmt/format.h>

using namespace dp_test;

namespace {

// Root needs --allow-run-as-root; a 2-core machine needs --oversubscribe.
std::string mpirun(int n) {
  return fmt::format("mpirun --allow-run-as-root --oversubscribe -n {}", n);
}

RunResult reference(int mb, int accum) {
  return train("ref", tiny_settings(20) + " --set train.micro_batch=" + std::to_string(mb) +
                          " --set train.grad_accum=" + std::to_string(accum));
}

}  // namespace

TEST(dp, mpi_transport_equivalence_2_ranks) {
  MT_SKIP_WITHOUT_MPIRUN();
  RunResult r = train("mpi2", tiny_settings(20) + " --set train.micro_batch=2 --set comm.transport=mpi "
                      "--set parallel.first_bucket_mb=0.002 --set parallel.bucket_mb=0.005", mpirun(2));
  EXPECT_NE(r.log.find("2 ranks over mpi"), std::string::npos) << r.log;
  expect_same_training(r, reference(4, 1), 1e-5);
}

TEST(dp, mpi_transport_equivalence_3_ranks_grad_accum) {
  MT_SKIP_WITHOUT_MPIRUN();
  RunResult r = train("mpi3", tiny_settings(20) + " --set train.micro_batch=1 --set train.grad_accum=2 "
                      "--set comm.transport=mpi --set parallel.bucket_mb=0.00723", mpirun(3));
  EXPECT_NE(r.log.find("3 ranks over mpi"), std::string::npos) << r.log;
  expect_same_training(r, reference(3, 2), 1e-5);
}

TEST(dp, mpirun_with_shared_memory_equivalence_4_ranks) {
  MT_SKIP_WITHOUT_MPIRUN();
  RunResult r = train("mpi4", tiny_settings(20) + " --set train.micro_batch=1 "
                      "--set parallel.first_bucket_mb=0.001 --set parallel.bucket_mb=0.003", mpirun(4));
  EXPECT_NE(r.log.find("4 ranks over shm"), std::string::npos) << r.log;
  expect_same_training(r, reference(4, 1), 1e-5);
}
