// A queue of work on one device. Kernels take the stream they run on as their
// first argument, so the layers above kernels/ order device work without
// naming a device API. On the CPU every op completes when its call returns:
// the CPU stream has no handle and waiting on it is a no-op. A CUDA stream's
// handle is its cudaStream_t (kernels/cuda/ casts it back).
#pragma once
#include "meshtrain/core/device.h"

namespace meshtrain {

struct Stream {
  Device device = Device::cpu();
  void* handle = nullptr;  // the backend's own stream; nullptr: the device's default

  static Stream cpu() { return {}; }
};

// The stream work on `device` goes to when nothing chose another.
inline Stream default_stream(Device device) { return {device, nullptr}; }

}  // namespace meshtrain
