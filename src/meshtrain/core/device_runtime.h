// What a device backend provides beside its kernels: memory, copies, streams
// and events. The CPU's runtime is trivial (host memory, copies that finish
// when they return, streams and events that are always complete); the CUDA
// backend registers its own (kernels/cuda/), so code above kernels/ moves
// data and orders work without naming a device API.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "meshtrain/core/caching_allocator.h"
#include "meshtrain/core/device.h"
#include "meshtrain/core/memory.h"
#include "meshtrain/core/stream.h"

namespace meshtrain {

// A marker in a stream: work queued after it can wait for everything before it.
struct Event {
  Device device = Device::cpu();
  void* handle = nullptr;  // the backend's own event; nullptr on the CPU
};

class DeviceRuntime {
 public:
  virtual ~DeviceRuntime() = default;
  // Devices of this type visible to the process (CPU: 1).
  virtual int device_count() const = 0;
  // Zero-filled bytes on `device`, counted under `cat`; ordered on `stream`.
  virtual void* allocate(Device device, size_t bytes, MemCategory cat, Stream stream) = 0;
  virtual void release(Device device, void* p, size_t bytes, MemCategory cat) = 0;
  // Copies between any two of host memory and this runtime's devices,
  // queued on `stream` (host memory that is not pinned makes it synchronous).
  virtual void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes,
                    Stream stream) = 0;
  virtual void fill_zero(void* p, size_t bytes, Stream stream) = 0;
  // Page-locked host memory for asynchronous copies (plain host memory on the CPU).
  virtual void* allocate_pinned(size_t bytes) = 0;
  virtual void release_pinned(void* p) = 0;

  virtual Stream create_stream(Device device) = 0;
  virtual void destroy_stream(Stream stream) = 0;
  virtual void synchronize(Stream stream) = 0;  // waits for the work queued so far
  virtual Event create_event(Device device) = 0;
  virtual void destroy_event(Event event) = 0;
  virtual void record(Event event, Stream stream) = 0;
  virtual void wait(Stream stream, Event event) = 0;  // later work on stream waits for event
  virtual bool query(Event event) = 0;                // true once complete
  virtual void synchronize(Event event) = 0;
  virtual double elapsed_ms(Event start, Event end) = 0;
  // The device's allocator accounting (the CPU's is core/memory.h's mem_stats).
  virtual DeviceMemStats memory_stats(Device device) = 0;
  // Starts the per-category and total peaks again from what is in use now.
  virtual void reset_peaks(Device device) = 0;
  // The device's dense matrix-multiply peak in GFLOP/s, with 16-bit operands
  // (half_operands) or f32, and how it was derived; 0 where the runtime does
  // not know it (the CPU measures its GEMMs instead). MFU's denominator.
  struct Peak {
    double gflops = 0;
    std::string basis;
  };
  virtual Peak matrix_peak(Device, bool /*half_operands*/) { return {}; }
  // One line on what this runtime sees, for --version and logs: the devices
  // (name, memory) or why there are none.
  virtual std::string describe() = 0;
};

// The runtime of `device`'s type; an Error naming the device when this build
// has none (a CPU-only build asked for cuda:0).
DeviceRuntime& runtime_for(Device device);
// Installs the runtime of a device type; backends call it when they load.
void register_device_runtime(DeviceType type, DeviceRuntime* runtime);

}  // namespace meshtrain
