#include "meshtrain/kernels/guarded_device.h"

#include <sys/mman.h>

#include <cstring>
#include <mutex>
#include <unordered_map>

#include "meshtrain/core/caching_allocator.h"
#include "meshtrain/core/device_runtime.h"
#include "meshtrain/core/error.h"

namespace meshtrain {

namespace {
// The mapped regions of the guarded device and how many scopes hold them open.
struct Regions {
  std::mutex mu;
  std::unordered_map<void*, size_t> sizes;
  int open = 0;

  static Regions& get() {
    static Regions r;
    return r;
  }
  void protect_all(int prot) {
    for (const auto& [p, n] : sizes)
      MT_CHECK(mprotect(p, n, prot) == 0, "guarded device: mprotect failed: {}", errno_str());
  }
};

void* map_region(size_t bytes) {
  Regions& r = Regions::get();
  std::lock_guard<std::mutex> lock(r.mu);
  const int prot = r.open > 0 ? PROT_READ | PROT_WRITE : PROT_NONE;
  void* p = mmap(nullptr, bytes, prot, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  r.sizes[p] = bytes;
  return p;
}

void unmap_region(void* p) {
  Regions& r = Regions::get();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.sizes.find(p);
  if (it == r.sizes.end()) return;
  munmap(p, it->second);
  r.sizes.erase(it);
}

// Host memory behind PROT_NONE pages; copies and zero-fills open it for
// their duration. Streams and events are the CPU's: every op is done when
// it returns.
class GuardedRuntime final : public DeviceRuntime {
 public:
  int device_count() const override { return 1; }
  void* allocate(Device, size_t bytes, MemCategory cat, Stream) override {
    void* p = allocator_.allocate(bytes, cat);
    GuardedAccess open;
    std::memset(p, 0, bytes);
    return p;
  }
  void release(Device, void* p, size_t, MemCategory) override { allocator_.release(p); }
  void copy(void* dst, Device, const void* src, Device, size_t bytes, Stream) override {
    GuardedAccess open;
    if (bytes) std::memmove(dst, src, bytes);
  }
  void fill_zero(void* p, size_t bytes, Stream) override {
    GuardedAccess open;
    if (bytes) std::memset(p, 0, bytes);
  }
  void* allocate_pinned(size_t bytes) override {
    return runtime_for(Device::cpu()).allocate_pinned(bytes);
  }
  void release_pinned(void* p) override { runtime_for(Device::cpu()).release_pinned(p); }
  Stream create_stream(Device d) override { return {d, nullptr}; }
  void destroy_stream(Stream) override {}
  void synchronize(Stream) override {}
  Event create_event(Device d) override { return {d, nullptr}; }
  void destroy_event(Event) override {}
  void record(Event, Stream) override {}
  void wait(Stream, Event) override {}
  bool query(Event) override { return true; }
  void synchronize(Event) override {}
  double elapsed_ms(Event, Event) override { return 0.0; }
  DeviceMemStats memory_stats(Device) override { return allocator_.stats(); }
  void reset_peaks(Device) override { allocator_.reset_peaks(); }
  std::string describe() override { return "host memory that only kernels may touch (test device)"; }

 private:
  CachingAllocator allocator_{RawAllocator{map_region, unmap_region, "guarded"}};
};
}  // namespace

bool on_guarded_device(const void* p) {
  Regions& r = Regions::get();
  std::lock_guard<std::mutex> lock(r.mu);
  const auto* c = static_cast<const char*>(p);
  for (const auto& [base, n] : r.sizes)
    if (c >= static_cast<const char*>(base) && c < static_cast<const char*>(base) + n) return true;
  return false;
}

GuardedAccess::GuardedAccess() {
  Regions& r = Regions::get();
  std::lock_guard<std::mutex> lock(r.mu);
  if (r.open++ == 0) r.protect_all(PROT_READ | PROT_WRITE);
}

GuardedAccess::~GuardedAccess() {
  Regions& r = Regions::get();
  std::lock_guard<std::mutex> lock(r.mu);
  if (--r.open == 0) r.protect_all(PROT_NONE);
}

bool register_guarded_device() {
  static GuardedRuntime runtime;
  static const bool once = (register_device_runtime(DeviceType::Guarded, &runtime), true);
  return once;
}

}  // namespace meshtrain
