// comm_check: run the collective check matrix on the world this process
// belongs to (meshtrain launch, mpirun or Slurm) and exit non-zero on any
// wrong element (and, on 3+ ranks, the point-to-point lane checks). Flags: --big (multi-chunk sizes), --transport shm|mpi.
#include <cstdio>
#include <cstring>
#include <string>

#include "check.h"

int main(int argc, char** argv) {
  using namespace meshtrain::comm;
  bool big = false;
  CommOptions opts = CommOptions::from_env();
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--big")) big = true;
    else if (!std::strcmp(argv[i], "--transport") && i + 1 < argc) opts.transport = argv[++i];
  }
  try {
    Communicator c = Communicator::from_env(opts);
    auto failures = testing::check_matrix(c, big);
    for (const auto& f : failures) std::fprintf(stderr, "%s\n", f.c_str());
    // A split into halves exercises sub-communicators on this transport too.
    Communicator half = c.split(c.rank() % 2, c.rank());
    auto sub = testing::check_collective(half, CollOp::Allreduce, "auto", meshtrain::DType::F32,
                                         ReduceOp::Sum, 1001);
    if (!sub.empty()) failures.push_back(sub);
    // Point-to-point on its own lanes on this transport too.
    if (c.size() >= 3)
      if (auto p2p = testing::check_p2p_lanes(c); !p2p.empty()) failures.push_back(p2p);
    double total = c.allreduce_scalar(static_cast<double>(failures.size()));
    std::printf("comm_check rank %d/%d transport %s: %zu local failures, %g in total\n", c.rank(),
                c.size(), std::string(c.transport()).c_str(), failures.size(), total);
    return total == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "comm_check: %s\n", e.what());
    return 2;
  }
}
