// test-links: mt_kernels mt_core
// The device caching allocator (core/caching_allocator.h), driven by a
// counting host allocator in place of cudaMalloc: the policy the CUDA
// backend relies on (no raw allocation in a steady-state step, exact
// per-category peaks, reuse only on the freeing stream, a clear error when
// the device is full) holds here for every build.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <set>
#include <vector>

#include "meshtrain/core/caching_allocator.h"
#include "meshtrain/core/device_runtime.h"
#include "meshtrain/core/error.h"
#include "meshtrain/kernels/kernel_table.h"

using namespace meshtrain;

namespace {
// A host stand-in for cudaMalloc with a capacity, counting what it holds.
struct CountingRaw {
  size_t capacity = size_t{1} << 30;
  size_t held = 0;
  int calls = 0;
  std::set<void*> live;
  RawAllocator make() {
    return {[this](size_t n) -> void* {
              if (held + n > capacity) return nullptr;
              ++calls;
              held += n;
              void* p = std::aligned_alloc(4096, n);
              live.insert(p);
              sizes[p] = n;
              return p;
            },
            [this](void* p) {
              held -= sizes[p];
              live.erase(p);
              std::free(p);
            },
            "test:0"};
  }
  std::map<void*, size_t> sizes;
};

// One "training step": activations of several sizes allocated in order,
// freed in reverse, plus a workspace that lives across the step.
void step(CachingAllocator& a, const std::vector<size_t>& sizes) {
  std::vector<void*> ps;
  for (size_t s : sizes) ps.push_back(a.allocate(s, MemCategory::Activations));
  void* ws = a.allocate(3 << 20, MemCategory::Workspace);
  a.release(ws);
  for (auto it = ps.rbegin(); it != ps.rend(); ++it) a.release(*it);
}
}  // namespace

TEST(caching_allocator, steady_state_steps_call_the_raw_allocator_never) {
  CountingRaw raw;
  CachingAllocator a(raw.make());
  const std::vector<size_t> sizes = {100, 4096, 70000, 1 << 20, (1 << 20) + 1, 5 << 20, 300, 12345678};
  step(a, sizes);
  const int64_t after_first = a.stats().raw_allocations;
  EXPECT_GT(after_first, 0);
  for (int i = 0; i < 10; ++i) step(a, sizes);
  EXPECT_EQ(a.stats().raw_allocations, after_first) << "a steady-state step allocated from the device";
  EXPECT_EQ(a.stats().total_current, 0);
}

TEST(caching_allocator, peaks_per_category_are_the_requested_bytes) {
  CountingRaw raw;
  CachingAllocator a(raw.make());
  void* p1 = a.allocate(1000, MemCategory::Parameters);
  void* g = a.allocate(3000, MemCategory::Gradients);
  void* act = a.allocate(5 << 20, MemCategory::Activations);
  a.release(act);
  void* act2 = a.allocate(1 << 20, MemCategory::Activations);
  const DeviceMemStats s = a.stats();
  EXPECT_EQ(s.peak[static_cast<size_t>(MemCategory::Parameters)], 1000);
  EXPECT_EQ(s.peak[static_cast<size_t>(MemCategory::Gradients)], 3000);
  EXPECT_EQ(s.peak[static_cast<size_t>(MemCategory::Activations)], 5 << 20);
  EXPECT_EQ(s.current[static_cast<size_t>(MemCategory::Activations)], 1 << 20);
  EXPECT_EQ(s.total_peak, 1000 + 3000 + (5 << 20));
  EXPECT_EQ(s.reserved, static_cast<int64_t>(raw.held));
  for (void* p : {p1, g, act2}) a.release(p);
}

TEST(caching_allocator, freed_neighbours_merge_and_empty_segments_go_back) {
  CountingRaw raw;
  CachingAllocator a(raw.make());
  void* x = a.allocate(1000, MemCategory::Other);
  void* y = a.allocate(1000, MemCategory::Other);
  void* z = a.allocate(1000, MemCategory::Other);
  EXPECT_EQ(raw.calls, 1) << "small blocks share one segment";
  EXPECT_EQ(static_cast<char*>(y) - static_cast<char*>(x), 1024) << "sizes round to 512 bytes";
  a.release(y);
  a.release(x);
  a.release(z);
  // Merged back into one block: a request for the whole segment fits without a new one.
  void* whole = a.allocate(CachingAllocator::kSmall, MemCategory::Other);
  EXPECT_EQ(whole, x);
  EXPECT_EQ(raw.calls, 1);
  a.release(whole);
  a.empty_cache();
  EXPECT_EQ(raw.held, 0u);
  EXPECT_EQ(a.stats().reserved, 0);
}

TEST(caching_allocator, a_block_is_reused_only_on_the_stream_that_freed_it) {
  CountingRaw raw;
  CachingAllocator a(raw.make());
  int s1 = 0, s2 = 0;  // two stream handles
  void* p = a.allocate(8 << 20, MemCategory::Activations, &s1);
  a.release(p);
  void* q = a.allocate(8 << 20, MemCategory::Activations, &s2);
  EXPECT_NE(p, q) << "work queued on stream 1 may still read the freed block";
  EXPECT_EQ(raw.calls, 2);
  a.release(q);
  void* r = a.allocate(8 << 20, MemCategory::Activations, &s1);
  EXPECT_EQ(r, p);
  a.release(r);
}

TEST(caching_allocator, a_full_device_returns_its_cache_then_names_the_request) {
  CountingRaw raw;
  raw.capacity = 16 << 20;
  CachingAllocator a(raw.make());
  void* big = a.allocate(10 << 20, MemCategory::Activations);
  a.release(big);  // cached: 10 MiB held, none in use
  void* other = a.allocate(12 << 20, MemCategory::Parameters);  // fits only after the cache goes back
  EXPECT_NE(other, nullptr);
  try {
    a.allocate(8 << 20, MemCategory::OptimizerState);
    ADD_FAILURE() << "no error when the device is full";
  } catch (const Error& e) {
    const std::string m = e.what();
    for (const char* want : {"out of memory on test:0", "8388608 bytes for optimizer",
                             "parameters 12582912"})
      EXPECT_NE(m.find(want), std::string::npos) << "missing '" << want << "' in: " << m;
  }
  a.release(other);
}

TEST(caching_allocator, releasing_a_foreign_pointer_is_an_error) {
  CountingRaw raw;
  CachingAllocator a(raw.make());
  int x = 0;
  EXPECT_THROW(a.release(&x), Error);
}

TEST(device_runtime, a_device_this_build_lacks_is_an_error_naming_it) {
  if (cuda_backend_built()) GTEST_SKIP() << "this build has the CUDA backend";
  try {
    runtime_for(Device::cuda(0));
    ADD_FAILURE() << "no error for cuda:0";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:0"), std::string::npos) << e.what();
  }
}

TEST(device_runtime, the_cpu_runtime_copies_and_zeroes_at_once) {
  DeviceRuntime& r = runtime_for(Device::cpu());
  EXPECT_EQ(r.device_count(), 1);
  std::vector<int> a = {1, 2, 3}, b(3);
  r.copy(b.data(), Device::cpu(), a.data(), Device::cpu(), sizeof(int) * 3, Stream::cpu());
  EXPECT_EQ(a, b);
  r.fill_zero(b.data(), sizeof(int) * 3, Stream::cpu());
  EXPECT_EQ(b, std::vector<int>(3, 0));
  const Event e = r.create_event(Device::cpu());
  r.record(e, Stream::cpu());
  EXPECT_TRUE(r.query(e));
}
