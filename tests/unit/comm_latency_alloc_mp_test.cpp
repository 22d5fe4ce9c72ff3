// test-links: mt_comm
// Allocations on the collectives' issue path, counted (and failed on demand)
// by this binary's global operator new, in real processes exchanging through
// the shm transport:
// - the latency path of small collectives allocates nothing (a heap
//   allocation per op was a fifth of a 256-byte allreduce, docs/PERFORMANCE.md);
// - an op whose issue runs out of memory leaves no trace: the rank's
//   sequence numbers stay in step with its peers'.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "harness.h"

using namespace meshtrain;
using namespace meshtrain::comm;
using namespace meshtrain::comm::testing;

// The replacements below pair operator new with free() through malloc; GCC
// cannot see that and warns at every inlined delete of this file.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

namespace {
std::atomic<long> g_allocations{0};
// > 0: that many allocations from now, the last one throws bad_alloc.
std::atomic<long> g_fail_countdown{0};
}  // namespace

void* operator new(std::size_t bytes) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (g_fail_countdown.load(std::memory_order_relaxed) > 0 &&
      g_fail_countdown.fetch_sub(1, std::memory_order_relaxed) == 1)
    throw std::bad_alloc();
  if (void* p = std::malloc(bytes ? bytes : 1)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t bytes) { return ::operator new(bytes); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }

namespace {

// Allocations made by `ops` calls of `op`, after a warm-up that lets every
// lazily built structure (algorithm cache, recorder ring) settle: the fewest
// of three rounds. An op whose peer is late (a loaded machine) leaves the
// inline path for the progress engine, which may allocate its Work state;
// the property tested is that the inline path allocates nothing, and a
// per-call allocation shows in every round. Every rank runs all three rounds
// (collectives: the op count must agree).
template <typename Op>
long allocations_of(Op&& op, int ops = 1000) {
  for (int i = 0; i < 200; ++i) op();
  long fewest = -1;
  for (int round = 0; round < 3; ++round) {
    const long before = g_allocations.load();
    for (int i = 0; i < ops; ++i) op();
    const long made = g_allocations.load() - before;
    fewest = fewest < 0 ? made : std::min(fewest, made);
  }
  return fewest;
}

}  // namespace

// Allreduce sizes on each path of the shm transport: one tiny line (8 B),
// several lines (200 B), the staging slots (256 B, 4 KiB); then the other
// collectives at a small size.
TEST(comm_latency, small_collectives_allocate_nothing) {
  for (int n : {2, 3}) {
    auto w = run_world(n, [](Communicator& c) {
      std::string e;
      auto expect_none = [&](const std::string& what, long allocs) {
        if (allocs != 0) e += fmt::format("{}: {} allocations in 1000 calls; ", what, allocs);
      };
      const int n = c.size();
      std::vector<float> in(1024 * n, 1.0f + static_cast<float>(c.rank())), out(1024 * n);
      for (size_t count : {2, 50, 64, 1024})
        expect_none(fmt::format("allreduce {} B", count * 4), allocations_of([&] {
          c.allreduce(in.data(), out.data(), count, DType::F32).wait();
        }));
      expect_none("reduce_scatter 64 B per rank", allocations_of([&] {
        c.reduce_scatter(in.data(), out.data(), 16, DType::F32).wait();
      }));
      expect_none("allgather 64 B per rank", allocations_of([&] {
        c.allgather(in.data(), out.data(), 16, DType::F32).wait();
      }));
      expect_none("broadcast 64 B", allocations_of([&] { c.broadcast(out.data(), 16, DType::F32, 0).wait(); }));
      expect_none("reduce 64 B", allocations_of([&] {
        c.reduce(in.data(), out.data(), 16, DType::F32, ReduceOp::Sum, 0).wait();
      }));
      expect_none("barrier", allocations_of([&] { c.barrier().wait(); }));
      return e;
    });
    EXPECT_TRUE(w.ok()) << "world " << n << ": " << w.report();
  }
}

// Rank 0 issues collectives and sends that fail for lack of memory at their
// first, second or third allocation (for a send: its body, its Work state after
// it is numbered, its lane); the ops after them must still carry the same
// numbers on every rank (the debug check compares them and throws if they
// differ), and the counters count only what was issued.
TEST(comm_latency, an_op_that_runs_out_of_memory_is_not_numbered) {
  CommOptions opts = CommOptions::from_env();
  opts.debug = true;
  opts.timeout_s = 30;
  opts.inline_bytes = 64 * 1024;  // the 512 KiB allreduces below are queued, so they allocate
  auto w = run_world(2, [](Communicator& c) {
    std::string e;
    std::vector<float> big(1 << 17, 1.0f), small(8, 1.0f);  // 512 KiB: queued, never inline
    c.allreduce(big.data(), big.size(), DType::F32).wait();
    if (c.rank() == 0) {
      const uint64_t calls_before = c.counters().calls_of(CollOp::Allreduce);
      int failed = 0;
      for (int attempt = 0; attempt < 5; ++attempt) {
        g_fail_countdown = attempt < 2 ? 1 : attempt - 1;  // sends: allocations 1, 2, 3
        try {
          if (attempt < 2) c.allreduce(big.data(), big.size(), DType::F32).wait();
          else c.send(small.data(), small.size(), DType::F32, 1).wait();
        } catch (const std::bad_alloc&) {
          ++failed;
        }
        g_fail_countdown = 0;
      }
      if (failed != 5) e += fmt::format("{} of 5 injected allocation failures reached the caller; ", failed);
      if (c.counters().calls_of(CollOp::Allreduce) != calls_before || c.counters().calls_of(CollOp::Send) != 0)
        e += "ops that were never issued were counted; ";
    }
    try {
      c.allreduce(big.data(), big.size(), DType::F32).wait();
      c.allreduce(small.data(), small.size(), DType::F32).wait();
      Work p2p = c.rank() == 0 ? c.send(small.data(), small.size(), DType::F32, 1)
                               : c.recv(small.data(), small.size(), DType::F32, 0);
      p2p.wait();
      Work last = c.barrier();
      last.wait();
      // Collectives issued: the first allreduce, two after the failures, the barrier.
      if (last.sequence_number() != 4) e += fmt::format("the barrier is collective #{}, want #4; ", last.sequence_number());
      if (p2p.sequence_number() != 1) e += fmt::format("the send/recv is p2p #{}, want #1; ", p2p.sequence_number());
    } catch (const std::exception& x) {
      e += std::string("after the failures: ") + x.what();
    }
    return e;
  }, opts);
  EXPECT_TRUE(w.ok()) << w.report();
}

// The counter sees allocations at all (so the test above can fail).
TEST(comm_latency, the_allocation_counter_counts) {
  const long before = g_allocations.load();
  auto* p = new std::vector<int>(100);
  const long after = g_allocations.load();
  delete p;
  EXPECT_GE(after - before, 2);
}
