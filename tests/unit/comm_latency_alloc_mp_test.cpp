// test-links: mt_comm
// The latency path of small collectives allocates nothing: a heap allocation
// per op was a fifth of a 256-byte allreduce (docs/PERFORMANCE.md, session 21).
// Every allocation of this binary is counted (global operator new below), in
// real processes exchanging through the shm transport.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "harness.h"

using namespace meshtrain;
using namespace meshtrain::comm;
using namespace meshtrain::comm::testing;

namespace {
std::atomic<long> g_allocations{0};
}  // namespace

void* operator new(std::size_t bytes) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
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
// lazily built structure (algorithm cache, recorder ring) settle.
template <typename Op>
long allocations_of(Op&& op, int ops = 1000) {
  for (int i = 0; i < 200; ++i) op();
  const long before = g_allocations.load();
  for (int i = 0; i < ops; ++i) op();
  return g_allocations.load() - before;
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

// The counter sees allocations at all (so the test above can fail).
TEST(comm_latency, the_allocation_counter_counts) {
  const long before = g_allocations.load();
  auto* p = new std::vector<int>(100);
  const long after = g_allocations.load();
  delete p;
  EXPECT_GE(after - before, 2);
}
