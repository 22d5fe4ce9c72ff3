// Two-level allreduce for ranks spread over nodes: reduce to the node's
// leader over the node-local communicator (shared memory), allreduce among
// the leaders (MPI across nodes), broadcast back inside the node. Segments
// are pipelined: while the leaders allreduce segment k on their own engine,
// the node already reduces segment k+1 and broadcasts segment k-1.
#include <cstring>
#include <vector>

#include "meshtrain/comm/algorithms/algorithm.h"
#include "meshtrain/comm/communicator.h"

namespace meshtrain::comm {

namespace {
constexpr size_t kSegmentBytes = 1 << 20;
}

void run_hierarchical(AlgoEnv& env, const CollArgs& a) {
  MT_CHECK(a.op == CollOp::Allreduce, "algorithm 'hierarchical' cannot run {}", coll_op_name(a.op));
  auto [local, leaders] = env.node_groups();
  char* buf = static_cast<char*>(a.recv);
  if (a.send != a.recv && a.bytes()) std::memcpy(buf, a.send, a.bytes());
  if (a.count == 0) return;
  const size_t esz = dtype_size(a.dtype);
  const size_t seg = std::max<size_t>(1, kSegmentBytes / esz);
  const size_t segments = (a.count + seg - 1) / seg;
  auto piece = [&](size_t k) { return std::pair<char*, size_t>{buf + k * seg * esz, std::min(seg, a.count - k * seg)}; };
  std::vector<Work> across(segments);
  for (size_t k = 0; k <= segments; ++k) {
    if (k < segments) {
      auto [p, len] = piece(k);
      local->reduce(p, p, len, a.dtype, a.redop, 0).wait();
      if (leaders) across[k] = leaders->allreduce(p, p, len, a.dtype, a.redop);
    }
    if (k >= 1) {
      auto [p, len] = piece(k - 1);
      across[k - 1].wait();
      local->broadcast(p, len, a.dtype, 0).wait();
    }
  }
}

}  // namespace meshtrain::comm
