// The shm transport's native collectives (algorithm "direct"): every rank's data is in mapped memory
// that peers read in place, so bytes cross the memory bus as few times as
// possible (the (3n-1)S scheme of docs/COMM.md when buffers are shared).
//
// Large messages go chunk by chunk through three scratch buffers per rank:
//   copy chunk j in  -> sync -> reduce my slice of chunk j (reading peers'
//   scratch) -> copy chunk j+1 in -> sync -> gather chunk j from peers ...
// one barrier step per chunk; a scratch buffer is rewritten only after every
// peer has passed the step that proves it finished reading it
// (ShmTransport::next_scratch). Buffers allocated with alloc_shared skip the
// copy-in: peers reduce and gather straight from them.
// Small messages (<= kSmallBytes) use one phase: write, sync, every rank
// reduces all n inputs itself.
#include <algorithm>
#include <cstring>
#include <vector>

#include "meshtrain/comm/reduce.h"
#include "meshtrain/comm/stream_copy.h"
#include "meshtrain/comm/transports/shm/shm_transport.h"

namespace meshtrain::comm {

namespace {

using shm::DataRef;
using shm::kSmallBytes;

void copy_bytes(void* dst, const void* src, size_t bytes) {
  if (bytes && dst != src) std::memcpy(dst, src, bytes);
}

constexpr int kLocalRanks = 16;  // no heap allocation on the latency path up to this many ranks

// One pointer per rank (the inputs of a reduction), on the stack up to
// kLocalRanks ranks: an allocation per op cost a fifth of a 256-byte allreduce.
class RankPointers {
 public:
  explicit RankPointers(int n) : heap_(n > kLocalRanks ? n : 0), p_(n > kLocalRanks ? heap_.data() : local_) {}
  RankPointers(const RankPointers&) = delete;  // p_ may point into this object
  RankPointers& operator=(const RankPointers&) = delete;
  const void*& operator[](int i) { return p_[i]; }
  const void* const* data() const { return p_; }

 private:
  const void* local_[kLocalRanks];
  std::vector<const void*> heap_;
  const void** p_;
};

void allreduce_small(ShmTransport& t, const OpContext& ctx, const CollArgs& a) {
  const int n = t.size();
  RankPointers srcs(n);
  alignas(64) char local_data[kLocalRanks * shm::kTinyBytes];  // peers' tiny data, read by reduce_many below
  std::vector<char> heap_data;
  if (a.bytes() <= shm::kTinyBytes) {  // data rides with the barrier flags, in each peer's lines
    t.sync_tiny(a.send, a.bytes(), ctx);
    if (a.bytes() <= shm::kTinyLineBytes) {
      for (int p = 0; p < n; ++p) srcs[p] = t.tiny_data(p);  // one line: read in place
    } else {  // several lines: each peer's data copied out of its lines, contiguous
      if (n > kLocalRanks) heap_data.resize(n * a.bytes());
      char* data = n > kLocalRanks ? heap_data.data() : local_data;
      for (int p = 0; p < n; ++p) {
        t.copy_tiny_data(p, data + p * a.bytes(), a.bytes());
        srcs[p] = data + p * a.bytes();
      }
    }
  } else {
    uint64_t parity = (t.step() + 1) & 1;
    std::memcpy(t.small_slot(t.rank(), parity), a.send, a.bytes());
    t.sync(ctx);
    for (int p = 0; p < n; ++p) srcs[p] = t.small_slot(p, parity);
  }
  reduce_many(a.recv, srcs.data(), n, a.count, a.dtype, a.redop);
}

void allreduce_large(ShmTransport& t, const OpContext& ctx, const CollArgs& a) {
  const int n = t.size(), r = t.rank();
  const size_t esz = dtype_size(a.dtype);
  // Below 32 MiB, half-size pieces (512 KiB by default) keep more of each
  // step's inputs and outputs in the 1 MiB L2 of the cores we measured on;
  // above, fewer barrier steps win (docs/PERFORMANCE.md, collectives).
  const size_t piece_bytes = a.bytes() < (32u << 20)
                                 ? std::min(t.chunk_bytes(), std::max<size_t>(64 * 1024, t.chunk_bytes() / 2))
                                 : t.chunk_bytes();
  const size_t chunk = piece_bytes / esz;
  const size_t chunks = (a.count + chunk - 1) / chunk;
  const char* send = static_cast<const char*>(a.send);
  char* recv = static_cast<char*>(a.recv);

  DataRef mine{-1, 0};
  if (a.send == a.recv)
    if (auto ref = t.find_shared(a.recv, a.bytes())) mine = *ref;
  const bool mine_shared = mine.buffer_id >= 0;

  auto chunk_len = [&](size_t j) { return std::min(chunk, a.count - j * chunk); };
  // A result at or above the streaming threshold (where, with its inputs, it
  // no longer fits the shared cache) goes out with streaming stores: no
  // read-for-ownership of the output, a third less memory traffic
  // (comm/stream_copy.h). Not the reduced slice of an in-place shared
  // buffer: the peers gather it from there right away.
  const bool streaming = a.bytes() >= streaming_threshold_bytes();
  // What peers read from my scratch goes there with ordinary or streaming
  // stores, whichever this size measured faster lately (exchange_tuner.h).
  ExchangeScope exchange(&t.exchange(mine_shared ? ExchangeUse::SharedAllreduce : ExchangeUse::Allreduce),
                         a.bytes());
  const bool stream_scratch = exchange.stream();
  auto copy_in = [&](size_t j, int idx) {
    if (mine_shared) return;
    size_t len = chunk_len(j);
    for (int p = 0; p < n; ++p) {
      if (p == r) continue;  // my own slice is reduced straight from my input
      Block b = block_of(len, n, p);
      copy_out(t.scratch(r, idx) + b.offset * esz, send + (j * chunk + b.offset) * esz,
               b.count * esz, stream_scratch);
    }
    if (stream_scratch) stream_fence();  // before the barrier publishes it
  };

  int idx = t.next_scratch(ctx);
  copy_in(0, idx);
  uint64_t parity = (t.step() + 1) & 1;
  t.control(r).refs[parity] = mine;
  t.scratch_published(idx);
  t.sync(ctx);
  std::vector<DataRef> refs(n);
  bool any_shared = false;
  for (int p = 0; p < n; ++p) {
    refs[p] = t.control(p).refs[parity];
    any_shared |= refs[p].buffer_id >= 0;
  }
  // Where peer p's chunk j (with scratch index idx) starts.
  auto peer_chunk = [&](int p, size_t j, int scratch_idx) -> const char* {
    if (refs[p].buffer_id >= 0) return t.resolve(p, refs[p], 0) + j * chunk * esz;
    return t.scratch(p, scratch_idx);
  };

  RankPointers srcs(n);
  for (size_t j = 0; j < chunks; ++j) {
    size_t len = chunk_len(j);
    Block mb = block_of(len, n, r);
    for (int p = 0; p < n; ++p)
      srcs[p] = p == r ? send + (j * chunk + mb.offset) * esz : peer_chunk(p, j, idx) + mb.offset * esz;
    char* out = recv + (j * chunk + mb.offset) * esz;
    if (mine_shared && stream_scratch) {
      // Zero-copy, stream mode: reduce through a small cache-resident block
      // and stream it into my shared buffer, where the peers gather it.
      constexpr size_t kBlockBytes = 32 * 1024;
      alignas(64) static thread_local char block[kBlockBytes];
      const size_t per_block = kBlockBytes / esz;
      std::vector<const void*> part(n);
      for (size_t done = 0; done < mb.count; done += per_block) {
        const size_t m = std::min(per_block, mb.count - done);
        for (int p = 0; p < n; ++p) part[p] = static_cast<const char*>(srcs[p]) + done * esz;
        reduce_many(block, part.data(), n, m, a.dtype, a.redop);
        stream_copy(out + done * esz, block, m * esz);
      }
      stream_fence();
    } else if (mine_shared) {
      reduce_many(out, srcs.data(), n, mb.count, a.dtype, a.redop);
    } else {
      // My slice goes to my scratch, where the peers gather it, and to my
      // output. Cache mode reduces into the scratch and copies out; stream
      // mode reduces into the output and streams that into the scratch.
      char* reduced = t.scratch(r, idx) + mb.offset * esz;
      if (stream_scratch) {
        reduce_many(out, srcs.data(), n, mb.count, a.dtype, a.redop);
        stream_copy(reduced, out, mb.count * esz);
        stream_fence();
      } else {
        reduce_many(reduced, srcs.data(), n, mb.count, a.dtype, a.redop);
        copy_out(out, reduced, mb.count * esz, streaming);
      }
    }

    int next = idx;
    if (j + 1 < chunks) {
      next = t.next_scratch(ctx);
      copy_in(j + 1, next);
      t.scratch_published(next);
    }
    t.sync(ctx);
    for (int p = 0; p < n; ++p) {
      if (p == r) continue;
      Block b = block_of(len, n, p);
      copy_out(recv + (j * chunk + b.offset) * esz, peer_chunk(p, j, idx) + b.offset * esz,
               b.count * esz, streaming);
    }
    idx = next;
  }
  if (streaming) stream_fence();  // the caller may read the result on another core
  if (any_shared) t.sync(ctx);  // peers may still be reading my shared buffer
  exchange.done();
}

void broadcast(ShmTransport& t, const OpContext& ctx, const CollArgs& a) {
  const int r = t.rank();
  const bool root = r == a.root;
  if (root && a.send && a.send != a.recv) copy_bytes(a.recv, a.send, a.bytes());
  char* buf = static_cast<char*>(a.recv);
  if (a.bytes() <= kSmallBytes) {
    uint64_t parity = (t.step() + 1) & 1;
    if (root) std::memcpy(t.small_slot(r, parity), buf, a.bytes());
    t.sync(ctx);
    if (!root) std::memcpy(buf, t.small_slot(a.root, parity), a.bytes());
    return;
  }
  DataRef mine{-1, 0};
  if (root)
    if (auto ref = t.find_shared(buf, a.bytes())) mine = *ref;
  const size_t chunk = t.chunk_bytes();
  const size_t chunks = (a.bytes() + chunk - 1) / chunk;
  auto len = [&](size_t j) { return std::min(chunk, a.bytes() - j * chunk); };

  // The root writes each chunk to its scratch with ordinary or streaming
  // stores, whichever this size measured faster lately (exchange_tuner.h).
  // Only the root's choice matters, so only the root times it.
  ExchangeScope exchange(root && mine.buffer_id < 0 ? &t.exchange(ExchangeUse::Broadcast) : nullptr,
                         a.bytes());
  const bool stream_scratch = exchange.stream();
  auto publish = [&](int scratch_index, const char* src, size_t bytes) {
    copy_out(t.scratch(r, scratch_index), src, bytes, stream_scratch);
    if (stream_scratch) stream_fence();
  };
  int idx = t.next_scratch(ctx);
  if (root && mine.buffer_id < 0) publish(idx, buf, len(0));
  uint64_t parity = (t.step() + 1) & 1;
  t.control(r).refs[parity] = mine;
  t.scratch_published(idx);
  t.sync(ctx);
  DataRef root_ref = t.control(a.root).refs[parity];
  for (size_t j = 0; j < chunks; ++j) {
    if (!root) {
      const char* src = root_ref.buffer_id >= 0 ? t.resolve(a.root, root_ref, 0) + j * chunk
                                                : t.scratch(a.root, idx);
      std::memcpy(buf + j * chunk, src, len(j));
    }
    if (j + 1 < chunks) {
      idx = t.next_scratch(ctx);
      if (root && root_ref.buffer_id < 0) publish(idx, buf + (j + 1) * chunk, len(j + 1));
      t.scratch_published(idx);
      t.sync(ctx);
    }
  }
  if (root_ref.buffer_id >= 0) t.sync(ctx);
  exchange.done();
}

// Per-rank blocks processed `per` elements at a time: reduce-scatter,
// allgather, alltoall and reduce share this loop shape.
void reduce_scatter(ShmTransport& t, const OpContext& ctx, const CollArgs& a) {
  const int n = t.size(), r = t.rank();
  const size_t esz = dtype_size(a.dtype);
  const size_t per = std::max<size_t>(1, t.chunk_bytes() / esz / n);
  const size_t biggest = block_of(a.count, n, 0).count;
  const size_t chunks = (biggest + per - 1) / per;
  const char* send = static_cast<const char*>(a.send);
  char* recv = static_cast<char*>(a.recv);
  auto piece = [&](int p, size_t j) {
    Block b = block_of(a.count, n, p);
    size_t start = std::min(b.count, j * per);
    return Block{b.offset + start, std::min(per, b.count - start)};
  };
  // Peers' blocks go to my scratch with ordinary or streaming stores,
  // whichever this size measured faster lately (exchange_tuner.h).
  ExchangeScope exchange(&t.exchange(ExchangeUse::ReduceScatter), a.bytes());
  const bool stream_scratch = exchange.stream();
  RankPointers srcs(n);
  for (size_t j = 0; j < chunks; ++j) {
    int idx = t.next_scratch(ctx);
    for (int p = 0; p < n; ++p) {
      if (p == r) continue;
      Block b = piece(p, j);
      copy_out(t.scratch(r, idx) + p * per * esz, send + b.offset * esz, b.count * esz, stream_scratch);
    }
    if (stream_scratch) stream_fence();  // before the barrier publishes it
    t.scratch_published(idx);
    t.sync(ctx);
    Block mb = piece(r, j);
    for (int p = 0; p < n; ++p)
      srcs[p] = p == r ? send + mb.offset * esz : t.scratch(p, idx) + r * per * esz;
    reduce_many(recv + (mb.offset - block_of(a.count, n, r).offset) * esz, srcs.data(), n,
                mb.count, a.dtype, a.redop);
  }
  exchange.done();
}

void allgather(ShmTransport& t, const OpContext& ctx, const CollArgs& a) {
  const int n = t.size(), r = t.rank();
  const size_t esz = dtype_size(a.dtype);
  const size_t per = std::max<size_t>(1, t.chunk_bytes() / esz);
  const size_t biggest = block_of(a.count, n, 0).count;
  const size_t chunks = (biggest + per - 1) / per;
  const char* send = static_cast<const char*>(a.send);
  char* recv = static_cast<char*>(a.recv);
  Block mine = block_of(a.count, n, r);
  // Like allreduce: an output at or above the streaming threshold goes out
  // with streaming stores (comm/stream_copy.h).
  const bool streaming = a.bytes() >= streaming_threshold_bytes();
  // My block goes to my scratch with ordinary or streaming stores, whichever
  // this size measured faster lately (exchange_tuner.h).
  ExchangeScope exchange(&t.exchange(ExchangeUse::Allgather), a.bytes());
  const bool stream_scratch = exchange.stream();
  if (recv + mine.offset * esz != send)
    copy_out(recv + mine.offset * esz, send, mine.count * esz, streaming);
  for (size_t j = 0; j < chunks; ++j) {
    int idx = t.next_scratch(ctx);
    size_t start = std::min(mine.count, j * per), len = std::min(per, mine.count - start);
    copy_out(t.scratch(r, idx), send + start * esz, len * esz, stream_scratch);
    if (stream_scratch) stream_fence();  // before the barrier publishes it
    t.scratch_published(idx);
    t.sync(ctx);
    for (int p = 0; p < n; ++p) {
      if (p == r) continue;
      Block b = block_of(a.count, n, p);
      size_t ps = std::min(b.count, j * per), pl = std::min(per, b.count - ps);
      copy_out(recv + (b.offset + ps) * esz, t.scratch(p, idx), pl * esz, streaming);
    }
  }
  if (streaming) stream_fence();
  exchange.done();
}

void alltoall(ShmTransport& t, const OpContext& ctx, const CollArgs& a) {
  const int n = t.size(), r = t.rank();
  const size_t esz = dtype_size(a.dtype);
  const size_t per = std::max<size_t>(1, t.chunk_bytes() / esz / n);
  const size_t chunks = (a.count + per - 1) / per;
  const char* send = static_cast<const char*>(a.send);
  char* recv = static_cast<char*>(a.recv);
  copy_bytes(recv + r * a.count * esz, send + r * a.count * esz, a.count * esz);
  for (size_t j = 0; j < chunks; ++j) {
    size_t start = j * per, len = std::min(per, a.count - start);
    int idx = t.next_scratch(ctx);
    for (int p = 0; p < n; ++p)
      if (p != r)
        std::memcpy(t.scratch(r, idx) + p * per * esz, send + (p * a.count + start) * esz, len * esz);
    t.scratch_published(idx);
    t.sync(ctx);
    for (int p = 0; p < n; ++p)
      if (p != r)
        std::memcpy(recv + (p * a.count + start) * esz, t.scratch(p, idx) + r * per * esz, len * esz);
  }
}

void reduce_to_root(ShmTransport& t, const OpContext& ctx, const CollArgs& a) {
  const int n = t.size(), r = t.rank();
  const size_t esz = dtype_size(a.dtype);
  const size_t per = std::max<size_t>(1, t.chunk_bytes() / esz);
  const size_t chunks = (a.count + per - 1) / per;
  const char* send = static_cast<const char*>(a.send);
  RankPointers srcs(n);
  for (size_t j = 0; j < chunks; ++j) {
    size_t start = j * per, len = std::min(per, a.count - start);
    int idx = t.next_scratch(ctx);
    if (r != a.root) std::memcpy(t.scratch(r, idx), send + start * esz, len * esz);
    t.scratch_published(idx);
    t.sync(ctx);
    if (r == a.root) {
      for (int p = 0; p < n; ++p) srcs[p] = p == r ? send + start * esz : t.scratch(p, idx);
      reduce_many(static_cast<char*>(a.recv) + start * esz, srcs.data(), n, len, a.dtype, a.redop);
    }
  }
}

}  // namespace

bool ShmTransport::native_supports(CollOp op) const {
  return op != CollOp::Send && op != CollOp::Recv;
}

void ShmTransport::run_native(const CollArgs& a, const OpContext& ctx) {
  ShmTransport& t = *this;
  if (a.op == CollOp::Barrier) return sync(ctx);
  if (a.count == 0) return;
  switch (a.op) {
    case CollOp::Allreduce:
      if (a.bytes() <= kSmallBytes) return allreduce_small(t, ctx, a);
      return allreduce_large(t, ctx, a);
    case CollOp::Broadcast: return broadcast(t, ctx, a);
    case CollOp::ReduceScatter: return reduce_scatter(t, ctx, a);
    case CollOp::Allgather: return allgather(t, ctx, a);
    case CollOp::Alltoall: return alltoall(t, ctx, a);
    case CollOp::Reduce: return reduce_to_root(t, ctx, a);
    default:
      fail("algorithm 'direct' cannot run {}", coll_op_name(a.op));
  }
}

}  // namespace meshtrain::comm
