// linalg_check: the distributed multiply's check matrix (linalg_cases.h) on
// the world this process belongs to (mpirun, meshtrain launch or Slurm); exit
// 0 only when every case on every rank holds. Flag: --transport shm|mpi.
#include <cstdio>
#include <cstring>
#include <string>

#include "linalg_cases.h"

int main(int argc, char** argv) {
  using namespace meshtrain;
  comm::CommOptions opts = comm::CommOptions::from_env();
  for (int i = 1; i < argc; ++i)
    if (!std::strcmp(argv[i], "--transport") && i + 1 < argc) opts.transport = argv[++i];
  try {
    linalg::Context ctx(comm::Communicator::from_env(opts));
    const std::string errors = linalg::testing::check_all(ctx);
    if (!errors.empty()) std::fprintf(stderr, "%s", errors.c_str());
    const double failed = ctx.world().allreduce_scalar(errors.empty() ? 0.0 : 1.0);
    std::printf("linalg_check rank %d/%d transport %s: %s, %g ranks failed\n", ctx.rank(), ctx.size(),
                std::string(ctx.world().transport()).c_str(), errors.empty() ? "ok" : "FAILED", failed);
    return failed == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "linalg_check: %s\n", e.what());
    return 2;
  }
}
