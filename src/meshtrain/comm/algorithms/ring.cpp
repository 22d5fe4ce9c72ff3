// Ring collectives: reduce-scatter then allgather around rank order, each
// step sending one block right while receiving (and reducing) one from the
// left. Large buffers go through in segments of n blocks so the working set
// stays in cache; within a step, the transport's FIFO slots pipeline the
// block. Broadcast and reduce use the same ring as a pipelined chain.
#include <cstring>
#include <vector>

#include "meshtrain/comm/algorithms/algorithm.h"

namespace meshtrain::comm {

namespace {

// Bytes per rank-block in one segment: large enough to amortise the
// n-1 handshakes of a step, small enough to stay in L2.
constexpr size_t kRingBlockBytes = 256 * 1024;
constexpr size_t kChainSegmentBytes = 128 * 1024;

int mod(int a, int n) { return ((a % n) + n) % n; }

// Reduce-scatter of buf[0, count) in place: afterwards rank r's block
// (r + shift) mod n holds the full reduction.
void ring_reduce_scatter_inplace(AlgoEnv& env, const CollArgs& a, char* buf, size_t count, int shift) {
  Transport& t = env.transport;
  int n = t.size(), r = t.rank();
  for (int s = 0; s < n - 1; ++s) {
    Block sb = block_of(count, n, mod(r - s - 1 + shift, n));
    Block rb = block_of(count, n, mod(r - s - 2 + shift, n));
    SendSpec send{mod(r + 1, n), byte_ptr(buf, sb.offset, a.dtype), sb.count * dtype_size(a.dtype)};
    RecvSpec recv{mod(r - 1, n), byte_ptr(buf, rb.offset, a.dtype), rb.count * dtype_size(a.dtype),
                  true, a.dtype, a.redop};
    t.exchange({&send, 1}, {&recv, 1}, env.ctx);
  }
}

// Allgather in place: rank r starts with block (r + shift) mod n.
void ring_allgather_inplace(AlgoEnv& env, const CollArgs& a, char* buf, size_t count, int shift) {
  Transport& t = env.transport;
  int n = t.size(), r = t.rank();
  for (int s = 0; s < n - 1; ++s) {
    Block sb = block_of(count, n, mod(r - s + shift, n));
    Block rb = block_of(count, n, mod(r - s - 1 + shift, n));
    SendSpec send{mod(r + 1, n), byte_ptr(buf, sb.offset, a.dtype), sb.count * dtype_size(a.dtype)};
    RecvSpec recv{mod(r - 1, n), byte_ptr(buf, rb.offset, a.dtype), rb.count * dtype_size(a.dtype)};
    t.exchange({&send, 1}, {&recv, 1}, env.ctx);
  }
}

void allreduce(AlgoEnv& env, const CollArgs& a) {
  int n = env.transport.size();
  char* buf = static_cast<char*>(a.recv);
  if (a.send != a.recv) std::memcpy(buf, a.send, a.bytes());
  if (n == 1 || a.count == 0) return;
  size_t seg = std::max<size_t>(n, kRingBlockBytes / dtype_size(a.dtype) * n);
  for (size_t off = 0; off < a.count; off += seg) {
    size_t len = std::min(seg, a.count - off);
    char* p = byte_ptr(buf, off, a.dtype);
    // After the reduce-scatter rank r holds block r + 1 - (n - 1) + ... : with
    // shift 0 it ends with block r, which the allgather then starts from.
    ring_reduce_scatter_inplace(env, a, p, len, 0);
    ring_allgather_inplace(env, a, p, len, 0);
  }
}

void reduce_scatter(AlgoEnv& env, const CollArgs& a) {
  int n = env.transport.size(), r = env.transport.rank();
  Block mine = block_of(a.count, n, r);
  std::vector<char> work(a.bytes());
  if (a.count) std::memcpy(work.data(), a.send, a.bytes());
  ring_reduce_scatter_inplace(env, a, work.data(), a.count, 0);
  if (mine.count)
    std::memmove(a.recv, byte_ptr(work.data(), mine.offset, a.dtype), mine.count * dtype_size(a.dtype));
}

void allgather(AlgoEnv& env, const CollArgs& a) {
  int n = env.transport.size(), r = env.transport.rank();
  Block mine = block_of(a.count, n, r);
  char* dst = byte_ptr(a.recv, mine.offset, a.dtype);
  if (a.send != dst && mine.count) std::memmove(dst, a.send, mine.count * dtype_size(a.dtype));
  ring_allgather_inplace(env, a, static_cast<char*>(a.recv), a.count, 0);
}

// Chain root -> root+1 -> ... in segments, so every hop works concurrently.
void broadcast(AlgoEnv& env, const CollArgs& a) {
  Transport& t = env.transport;
  int n = t.size(), r = t.rank(), pos = mod(r - a.root, n);
  char* buf = static_cast<char*>(a.recv);
  if (r == a.root && a.send && a.send != a.recv) std::memcpy(buf, a.send, a.bytes());
  for (size_t off = 0; off < a.bytes(); off += kChainSegmentBytes) {
    size_t len = std::min(kChainSegmentBytes, a.bytes() - off);
    if (pos > 0) t.recv(mod(r - 1, n), buf + off, len, env.ctx);
    if (pos < n - 1) t.send(mod(r + 1, n), buf + off, len, env.ctx);
  }
}

// Chain towards the root: the rank farthest from it starts each segment.
void reduce(AlgoEnv& env, const CollArgs& a) {
  Transport& t = env.transport;
  int n = t.size(), r = t.rank(), pos = mod(r - a.root, n);
  std::vector<char> own;
  char* acc;
  if (r == a.root) {
    acc = static_cast<char*>(a.recv);
  } else {
    own.resize(a.bytes());
    acc = own.data();
  }
  if (a.bytes() && acc != a.send) std::memcpy(acc, a.send, a.bytes());
  size_t seg = kChainSegmentBytes / dtype_size(a.dtype) * dtype_size(a.dtype);
  for (size_t off = 0; off < a.bytes(); off += seg) {
    size_t len = std::min(seg, a.bytes() - off);
    if (pos < n - 1) {
      RecvSpec rs{mod(r + 1, n), acc + off, len, true, a.dtype, a.redop};
      t.exchange({}, {&rs, 1}, env.ctx);
    }
    if (pos > 0) t.send(mod(r - 1, n), acc + off, len, env.ctx);
  }
}

}  // namespace

void run_ring(AlgoEnv& env, const CollArgs& a) {
  switch (a.op) {
    case CollOp::Allreduce: return allreduce(env, a);
    case CollOp::ReduceScatter: return reduce_scatter(env, a);
    case CollOp::Allgather: return allgather(env, a);
    case CollOp::Broadcast: return broadcast(env, a);
    case CollOp::Reduce: return reduce(env, a);
    default: fail("algorithm 'ring' cannot run {}", coll_op_name(a.op));
  }
}

}  // namespace meshtrain::comm
