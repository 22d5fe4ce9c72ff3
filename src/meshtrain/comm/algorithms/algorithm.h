// An algorithm runs one collective over a Transport. Each lives in its own
// file; this registry lists them so the selector, tests and benchmarks can
// pick any of them by name. Avg arrives here as Sum: the communicator
// divides once the sum is complete.
#pragma once
#include <functional>
#include <string_view>
#include <vector>

#include "meshtrain/comm/transport.h"
#include "meshtrain/comm/types.h"

namespace meshtrain::comm {

class Communicator;

// What an algorithm may use besides the transport: the two-level algorithm
// needs the node-local and the cross-node communicators.
struct AlgoEnv {
  Transport& transport;
  const OpContext& ctx;
  std::function<std::pair<Communicator*, Communicator*>()> node_groups;  // (local, leaders or null)
};

struct Algorithm {
  std::string_view name;
  std::string_view summary;
  bool (*supports)(CollOp op, std::string_view transport_kind);
  void (*run)(AlgoEnv& env, const CollArgs& args);
};

const std::vector<Algorithm>& all_algorithms();
// nullptr when no algorithm has this name.
const Algorithm* find_algorithm(std::string_view name);

// Per-algorithm entry points (one file each). The transports' native
// algorithms ("direct" on shm, "mpi" on MPI) live with their transports.
void run_ring(AlgoEnv& env, const CollArgs& a);
void run_tree(AlgoEnv& env, const CollArgs& a);
void run_halving_doubling(AlgoEnv& env, const CollArgs& a);
void run_pairwise(AlgoEnv& env, const CollArgs& a);
void run_hierarchical(AlgoEnv& env, const CollArgs& a);

// Helpers shared by the point-to-point algorithms.
inline char* byte_ptr(void* p, size_t elems, DType t) {
  return static_cast<char*>(p) + elems * dtype_size(t);
}
inline const char* byte_ptr(const void* p, size_t elems, DType t) {
  return static_cast<const char*>(p) + elems * dtype_size(t);
}

}  // namespace meshtrain::comm
