// Tensor parallelism under mpirun: dp 2 x tp 2 whose tp groups talk over the
// MPI transport (each rank its own emulated node, so no group falls back to
// shared memory) reproduces the one-rank run (losses within 1e-5, tensors 5e-5), with sequence
// parallelism too; a checkpoint it writes resumes at tp 1 on one process.
#include "dp_harness.h"
#include "mpirun_available.h"

#include <fmt/format.h>

using namespace dp_test;

namespace {

// fmt, not string +: GCC 12 -O3 warns (-Warray-bounds, a false positive) on the concatenation.
std::string mpirun(int n) {
  return fmt::format("mpirun --allow-run-as-root --oversubscribe -x MESHTRAIN_COMM_NODE_SIZE=1 -n {}", n);
}

std::string settings() {
  std::string s = tiny_settings(12);
  const std::string from = "model.preset=tiny";
  s.replace(s.find(from), from.size(), "model.preset=llama-tiny --set model.ffn_hidden=38");
  return s + " --set train.clip=1";
}

}  // namespace

TEST(llama_tp_mpi, dp2_tp2_over_mpi_matches_one_rank_and_resumes_at_tp1) {
  MT_SKIP_WITHOUT_MPIRUN();
  RunResult ref = train("tpmpi_ref", settings() + " --set train.micro_batch=4");
  const std::string ckpt = (workdir() / "tpmpi" / "ckpt").string();
  RunResult r = train("tpmpi", settings() + " --set train.micro_batch=2 --set parallel.tp=2 "
                      "--set comm.transport=mpi --set zero.stage=1 --set checkpoint.every=6 "
                      "--set checkpoint.resume=never --set checkpoint.dir=" + ckpt, mpirun(4));
  EXPECT_NE(r.log.find("tp collectives over mpi"), std::string::npos) << r.log;
  expect_same_training(r, ref, 1e-5);
  RunResult sp = train("tpmpi_sp", settings() + " --set train.micro_batch=2 --set parallel.tp=2 "
                       "--set parallel.sequence_parallel=true --set comm.transport=mpi", mpirun(4));
  expect_same_training(sp, ref, 1e-5);
  RunResult back = train("tpmpi_back", settings() + " --set train.micro_batch=4 "
                         "--set checkpoint.resume=" + ckpt + "/step_00000006");
  ASSERT_EQ(back.status, 0) << back.log;
  const auto got = back.metrics(), want = ref.metrics();
  ASSERT_EQ(got.size(), 6u);
  for (const auto& row : got) {
    const int step = row["step"];
    const double a = row["loss"], b = want.at(step - 1)["loss"];
    EXPECT_LE(std::abs(a - b), 1e-5 * std::abs(b)) << "step " << step;  // dp_harness.h
  }
}
