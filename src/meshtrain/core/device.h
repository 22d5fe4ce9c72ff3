// Where a tensor's bytes live. CPU today; CUDA is reserved so that code which
// passes devices around is already written for it.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace meshtrain {

enum class DeviceType : uint8_t { CPU, CUDA };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;  // GPU ordinal for CUDA; always 0 for CPU

  static Device cpu() { return {DeviceType::CPU, 0}; }
  static Device cuda(int i) { return {DeviceType::CUDA, i}; }
  bool is_cpu() const { return type == DeviceType::CPU; }
  bool operator==(const Device&) const = default;
  std::string str() const { return type == DeviceType::CPU ? "cpu" : "cuda:" + std::to_string(index); }
};

// "cpu", "cuda" (= cuda:0) or "cuda:N"; anything else is an Error naming it.
Device parse_device(std::string_view text);

}  // namespace meshtrain
