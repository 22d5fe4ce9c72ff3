// Binomial-tree collectives: reduce towards the root in log2(n) rounds, then
// broadcast back down. Latency grows with log n instead of n, which wins for
// small messages on many ranks. Large messages go in segments so a parent
// forwards segment k while its children already send k+1.
#include <cstring>
#include <vector>

#include "meshtrain/comm/algorithms/algorithm.h"

namespace meshtrain::comm {

namespace {

constexpr size_t kTreeSegmentBytes = 128 * 1024;

int mod(int a, int n) { return ((a % n) + n) % n; }

void tree_reduce(AlgoEnv& env, const CollArgs& a, char* acc, size_t off, size_t len) {
  Transport& t = env.transport;
  int n = t.size(), v = mod(t.rank() - a.root, n);
  for (int mask = 1; mask < n; mask <<= 1) {
    if (v & mask) {
      t.send(mod(v - mask + a.root, n), acc + off, len, env.ctx);
      return;
    }
    if (v + mask < n) {
      RecvSpec rs{mod(v + mask + a.root, n), acc + off, len, true, a.dtype, a.redop};
      t.exchange({}, {&rs, 1}, env.ctx);
    }
  }
}

void tree_broadcast(AlgoEnv& env, int root, char* buf, size_t off, size_t len) {
  Transport& t = env.transport;
  int n = t.size(), v = mod(t.rank() - root, n);
  int mask = 1;
  while (mask < n) {
    if (v & mask) {
      t.recv(mod(v - mask + root, n), buf + off, len, env.ctx);
      break;
    }
    mask <<= 1;
  }
  for (mask >>= 1; mask > 0; mask >>= 1)
    if (v + mask < n) t.send(mod(v + mask + root, n), buf + off, len, env.ctx);
}

size_t segment_bytes(DType t) { return kTreeSegmentBytes / dtype_size(t) * dtype_size(t); }

}  // namespace

void run_tree(AlgoEnv& env, const CollArgs& a) {
  Transport& t = env.transport;
  size_t seg = segment_bytes(a.dtype);
  switch (a.op) {
    case CollOp::Allreduce: {
      char* buf = static_cast<char*>(a.recv);
      if (a.send != a.recv && a.bytes()) std::memcpy(buf, a.send, a.bytes());
      CollArgs at0 = a;
      at0.root = 0;
      for (size_t off = 0; off < a.bytes(); off += seg) {
        size_t len = std::min(seg, a.bytes() - off);
        tree_reduce(env, at0, buf, off, len);
        tree_broadcast(env, 0, buf, off, len);
      }
      return;
    }
    case CollOp::Broadcast: {
      char* buf = static_cast<char*>(a.recv);
      if (t.rank() == a.root && a.send && a.send != a.recv) std::memcpy(buf, a.send, a.bytes());
      for (size_t off = 0; off < a.bytes(); off += seg)
        tree_broadcast(env, a.root, buf, off, std::min(seg, a.bytes() - off));
      return;
    }
    case CollOp::Reduce: {
      std::vector<char> own;
      char* acc = static_cast<char*>(a.recv);
      if (t.rank() != a.root) {
        own.resize(a.bytes());
        acc = own.data();
      }
      if (a.bytes() && acc != a.send) std::memcpy(acc, a.send, a.bytes());
      for (size_t off = 0; off < a.bytes(); off += seg)
        tree_reduce(env, a, acc, off, std::min(seg, a.bytes() - off));
      return;
    }
    default: fail("algorithm 'tree' cannot run {}", coll_op_name(a.op));
  }
}

}  // namespace meshtrain::comm
