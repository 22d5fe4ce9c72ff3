// Alltoall by n-1 rounds of pairwise exchange (round s: send to r+s, receive
// from r-s), and a barrier built from the transport's own.
#include <cstring>

#include "meshtrain/comm/algorithms/algorithm.h"

namespace meshtrain::comm {

void run_pairwise(AlgoEnv& env, const CollArgs& a) {
  Transport& t = env.transport;
  if (a.op == CollOp::Barrier) return t.barrier(env.ctx);
  MT_CHECK(a.op == CollOp::Alltoall, "algorithm 'pairwise' cannot run {}", coll_op_name(a.op));
  const int n = t.size(), r = t.rank();
  const size_t block = a.bytes();
  const char* send = static_cast<const char*>(a.send);
  char* recv = static_cast<char*>(a.recv);
  MT_CHECK(send != recv, "alltoall cannot run in place");
  if (block) std::memcpy(recv + r * block, send + r * block, block);
  for (int s = 1; s < n; ++s) {
    int to = (r + s) % n, from = (r - s + n) % n;
    SendSpec ss{to, send + to * block, block};
    RecvSpec rs{from, recv + from * block, block};
    t.exchange({&ss, 1}, {&rs, 1}, env.ctx);
  }
}

}  // namespace meshtrain::comm
