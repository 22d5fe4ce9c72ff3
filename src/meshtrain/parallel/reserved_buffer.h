// A flat f32 buffer reserved as virtual memory: the full size is mapped (so a
// model's parameter or gradient views stay valid) but pages are committed
// only when first written, and discard() hands whole pages back to the
// kernel (MADV_DONTNEED; they read as zero afterwards). ZeRO-2/3 keep only
// the parts in use resident. The owner accounts the bytes it holds
// (core/memory.h ExternalBytes): this class does not guess from pages.
#pragma once
#include <cstddef>
#include <cstdint>

#include "meshtrain/core/tensor.h"

namespace meshtrain::parallel {

class ReservedBuffer {
 public:
  ReservedBuffer() = default;
  explicit ReservedBuffer(int64_t numel);
  ~ReservedBuffer();
  ReservedBuffer(const ReservedBuffer&) = delete;
  ReservedBuffer& operator=(const ReservedBuffer&) = delete;

  float* data() const { return data_; }
  int64_t numel() const { return numel_; }
  // A view of all elements (keep this object alive while it is used).
  Tensor tensor() const;
  // The first `numel` elements of a 16-bit dtype (mixed precision's compute
  // copy; reserve numel / 2 rounded up floats).
  Tensor half_tensor(int64_t numel, DType dtype) const;
  // Elements [begin, end) become zero: the whole pages inside are returned
  // to the kernel, the partial pages at the ends are cleared in place.
  void discard(int64_t begin, int64_t end);
  // The same for bytes [begin, end) (16-bit views).
  void discard_bytes(size_t begin, size_t end);

 private:
  float* data_ = nullptr;
  int64_t numel_ = 0;
  size_t bytes_ = 0;
};

}  // namespace meshtrain::parallel
