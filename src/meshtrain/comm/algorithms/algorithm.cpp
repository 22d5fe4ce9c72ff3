#include "meshtrain/comm/algorithms/algorithm.h"

namespace meshtrain::comm {

namespace {

// Native algorithms belong to one transport (transport.h: run_native).
bool direct_supports(CollOp op, std::string_view kind) {
  return kind == "shm" && op != CollOp::Send && op != CollOp::Recv;
}
[[maybe_unused]] bool mpi_supports(CollOp op, std::string_view kind) {  // unused without MPI
  return kind == "mpi" && op != CollOp::Send && op != CollOp::Recv;
}
void run_native(AlgoEnv& env, const CollArgs& a) { env.transport.run_native(a, env.ctx); }
bool ring_supports(CollOp op, std::string_view) {
  return op == CollOp::Allreduce || op == CollOp::ReduceScatter || op == CollOp::Allgather ||
         op == CollOp::Broadcast || op == CollOp::Reduce;
}
bool tree_supports(CollOp op, std::string_view) {
  return op == CollOp::Allreduce || op == CollOp::Broadcast || op == CollOp::Reduce;
}
bool hd_supports(CollOp op, std::string_view) { return op == CollOp::Allreduce; }
bool pairwise_supports(CollOp op, std::string_view) {
  return op == CollOp::Alltoall || op == CollOp::Barrier;
}
bool hier_supports(CollOp op, std::string_view) { return op == CollOp::Allreduce; }

}  // namespace

const std::vector<Algorithm>& all_algorithms() {
  static const std::vector<Algorithm> list = {
      {"direct", "shm only: peers read each other's mapped buffers (RS+AG, one phase when small)",
       direct_supports, run_native},
      {"ring", "reduce-scatter + allgather around a ring, chunked, pipelined through FIFOs",
       ring_supports, run_ring},
      {"tree", "binomial tree reduce + broadcast, pipelined in segments", tree_supports, run_tree},
      {"halving_doubling", "recursive halving reduce-scatter + doubling allgather (any n)",
       hd_supports, run_halving_doubling},
      {"pairwise", "alltoall by n-1 pairwise exchanges; dissemination-free barrier",
       pairwise_supports, run_pairwise},
      {"hierarchical", "reduce in node, allreduce across node leaders, broadcast in node",
       hier_supports, run_hierarchical},
#if MESHTRAIN_HAVE_MPI
      {"mpi", "the MPI library's own collectives (MPI_Iallreduce, ...)", mpi_supports,
       run_native},
#endif
  };
  return list;
}

const Algorithm* find_algorithm(std::string_view name) {
  for (const auto& a : all_algorithms())
    if (a.name == name) return &a;
  return nullptr;
}

}  // namespace meshtrain::comm
