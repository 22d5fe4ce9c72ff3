#include "meshtrain/core/storage.h"

#include "meshtrain/core/error.h"

namespace meshtrain {

std::shared_ptr<Storage> Storage::allocate(size_t bytes, MemCategory cat, Device device) {
  MT_CHECK(device.is_cpu(), "allocation on {} needs the CUDA backend, which this build lacks",
           device.str());
  std::shared_ptr<Storage> s(new Storage());
  s->data_ = aligned_alloc_tagged(bytes, cat);
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
  if (owned_) aligned_free_tagged(data_, bytes_, cat_);
}

}  // namespace meshtrain
