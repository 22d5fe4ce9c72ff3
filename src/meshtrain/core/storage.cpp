#include "meshtrain/core/storage.h"

#include "meshtrain/core/device_runtime.h"
#include "meshtrain/core/error.h"

namespace meshtrain {

std::shared_ptr<Storage> Storage::allocate(size_t bytes, MemCategory cat, Device device) {
  std::shared_ptr<Storage> s(new Storage());
  s->data_ = device.is_cpu() ? aligned_alloc_tagged(bytes, cat)
                             : runtime_for(device).allocate(device, bytes, cat,
                                                            default_stream(device));
  s->bytes_ = bytes;
  s->device_ = device;
  s->cat_ = cat;
  s->owned_ = true;
  return s;
}

std::shared_ptr<Storage> Storage::borrow(void* data, size_t bytes, Device device) {
  std::shared_ptr<Storage> s(new Storage());
  s->data_ = data;
  s->bytes_ = bytes;
  s->device_ = device;
  return s;
}

Storage::~Storage() {
  if (!owned_) return;
  if (device_.is_cpu())
    aligned_free_tagged(data_, bytes_, cat_);
  else
    runtime_for(device_).release(device_, data_, bytes_, cat_);
}

}  // namespace meshtrain
