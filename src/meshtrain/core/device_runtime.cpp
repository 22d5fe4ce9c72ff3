#include "meshtrain/core/device_runtime.h"

#include <cstdlib>
#include <cstring>

#include "meshtrain/core/error.h"

namespace meshtrain {

namespace {
// Host memory: allocations through core/memory.h's counters, copies and
// zero-fills done when called, streams and events always complete.
class CpuRuntime final : public DeviceRuntime {
 public:
  int device_count() const override { return 1; }
  void* allocate(Device, size_t bytes, MemCategory cat, Stream) override {
    return aligned_alloc_tagged(bytes, cat);
  }
  void release(Device, void* p, size_t bytes, MemCategory cat) override {
    aligned_free_tagged(p, bytes, cat);
  }
  void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes,
            Stream) override {
    MT_CHECK(dst_device.is_cpu() && src_device.is_cpu(),
             "the CPU runtime copies host memory only ({} -> {})", src_device.str(),
             dst_device.str());
    if (bytes) std::memmove(dst, src, bytes);
  }
  void fill_zero(void* p, size_t bytes, Stream) override {
    if (bytes) std::memset(p, 0, bytes);
  }
  // Host memory is what a "pinned" buffer is for on the CPU; its owner counts it.
  void* allocate_pinned(size_t bytes) override {
    void* p = std::aligned_alloc(kAlignment, (bytes + kAlignment - 1) / kAlignment * kAlignment);
    MT_CHECK(p, "out of host memory allocating a {}-byte staging buffer", bytes);
    return p;
  }
  void release_pinned(void* p) override { std::free(p); }
  Stream create_stream(Device) override { return Stream::cpu(); }
  void destroy_stream(Stream) override {}
  void synchronize(Stream) override {}
  Event create_event(Device) override { return {}; }
  void destroy_event(Event) override {}
  void record(Event, Stream) override {}
  void wait(Stream, Event) override {}
  bool query(Event) override { return true; }
  void synchronize(Event) override {}
  double elapsed_ms(Event, Event) override { return 0.0; }
  std::string describe() override { return "host memory"; }
  void reset_peaks(Device) override { mem_reset_peaks(); }
  DeviceMemStats memory_stats(Device) override {
    const MemStats m = mem_stats();
    DeviceMemStats d;
    d.current = m.current;
    d.peak = m.peak;
    d.total_current = m.total_current;
    d.total_peak = m.total_peak;
    return d;
  }
};

DeviceRuntime*& slot(DeviceType type) {
  static CpuRuntime cpu;
  static DeviceRuntime* slots[3] = {&cpu, nullptr, nullptr};
  return slots[static_cast<int>(type)];
}
}  // namespace

DeviceRuntime& runtime_for(Device device) {
  DeviceRuntime* r = slot(device.type);
  MT_CHECK(r, "no runtime for device {} in this build (CPU only; configure with "
           "-DMESHTRAIN_CUDA=ON for the CUDA backend)", device.str());
  return *r;
}

void register_device_runtime(DeviceType type, DeviceRuntime* runtime) { slot(type) = runtime; }

}  // namespace meshtrain
