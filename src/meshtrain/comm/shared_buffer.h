// Memory that peers of a communicator can read directly. Allocate gradient
// buckets here and their in-place allreduce skips the copy into the
// transport's scratch: peers reduce and gather straight from it.
#pragma once
#include <cstddef>
#include <memory>
#include <vector>

#include "meshtrain/core/tensor.h"

namespace meshtrain::comm {

// The memory behind a SharedBuffer. A transport whose peers can map each
// other's memory (shm) derives its own mapping; everywhere else it is this
// rank's private, page-aligned, zeroed memory (private_mapping).
struct SharedMapping {
  virtual ~SharedMapping();
  size_t bytes = 0;
  void* local = nullptr;  // this rank's view
  // Every rank's segment as this rank maps it (shm); empty where peers'
  // memory cannot be mapped (private_mapping).
  std::vector<void*> peers;
};
std::shared_ptr<SharedMapping> private_mapping(size_t bytes);

class SharedBuffer {
 public:
  SharedBuffer() = default;
  explicit SharedBuffer(std::shared_ptr<SharedMapping> m) : m_(std::move(m)) {}
  void* data() const;
  size_t bytes() const;
  template <typename T> T* as() const { return static_cast<T*>(data()); }
  // Rank r's segment mapped here, or null where the transport cannot map
  // peers' memory (its peers are on other hosts, or MPI).
  void* peer(int r) const;
  // A view of `count` elements from `elem_offset` (keep this buffer alive
  // while the tensor is used).
  Tensor tensor(DType dtype, int64_t count, int64_t elem_offset = 0) const;
  explicit operator bool() const { return m_ != nullptr; }

 private:
  std::shared_ptr<SharedMapping> m_;
};

}  // namespace meshtrain::comm
