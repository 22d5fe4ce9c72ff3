// Where a tensor's bytes live: host memory, a CUDA GPU, or the guarded test
// device (host memory that only kernels may touch: kernels/guarded_device.h),
// on which the CPU suite proves that no code above kernels/ reads a device's
// memory directly.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace meshtrain {

enum class DeviceType : uint8_t { CPU, CUDA, Guarded };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;  // GPU ordinal for CUDA; always 0 for CPU

  static Device cpu() { return {DeviceType::CPU, 0}; }
  static Device cuda(int i) { return {DeviceType::CUDA, i}; }
  static Device guarded() { return {DeviceType::Guarded, 0}; }
  bool is_cpu() const { return type == DeviceType::CPU; }
  bool operator==(const Device&) const = default;
  std::string str() const {
    if (type == DeviceType::Guarded) return "guarded";
    return type == DeviceType::CPU ? "cpu" : "cuda:" + std::to_string(index);
  }
};

// "cpu", "cuda" (= cuda:0), "cuda:N" or "guarded"; anything else is an Error naming it.
Device parse_device(std::string_view text);

}  // namespace meshtrain
