// A reference-counted, aligned block of bytes on one device.
#pragma once
#include <cstddef>
#include <memory>

#include "meshtrain/core/device.h"
#include "meshtrain/core/memory.h"

namespace meshtrain {

class Storage {
 public:
  // Allocates `bytes` zeroed bytes on `device`, counted under `cat`.
  static std::shared_ptr<Storage> allocate(size_t bytes, MemCategory cat = MemCategory::Other,
                                           Device device = Device::cpu());
  // Wraps memory owned elsewhere (a mapped file, shared memory); not freed here.
  static std::shared_ptr<Storage> borrow(void* data, size_t bytes, Device device = Device::cpu());
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }
  MemCategory category() const { return cat_; }

 private:
  Storage() = default;
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Device device_{};
  MemCategory cat_ = MemCategory::Other;
  bool owned_ = false;
};

}  // namespace meshtrain
