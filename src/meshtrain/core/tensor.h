// A contiguous, typed view into shared Storage. Tensors never own strided
// layouts: every view is a contiguous range of a flat buffer, which is what
// flat parameter/gradient buffers, buckets and shards need.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "meshtrain/core/dtype.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/storage.h"

namespace meshtrain {

using Shape = std::vector<int64_t>;
int64_t shape_numel(const Shape& s);
std::string shape_str(const Shape& s);

class Tensor {
 public:
  Tensor() = default;
  // A new zero-filled tensor with its own storage.
  static Tensor zeros(Shape shape, DType dtype = DType::F32, MemCategory cat = MemCategory::Other,
                      Device device = Device::cpu());
  // A view of `shape` starting `elem_offset` elements into `storage`.
  Tensor(std::shared_ptr<Storage> storage, int64_t elem_offset, Shape shape, DType dtype);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_.at(i < 0 ? shape_.size() + i : i); }
  int ndim() const { return static_cast<int>(shape_.size()); }
  int64_t numel() const { return numel_; }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_ ? storage_->device() : Device::cpu(); }
  size_t nbytes() const { return static_cast<size_t>(numel_) * dtype_size(dtype_); }
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  int64_t offset() const { return offset_; }

  void* raw() const { return static_cast<char*>(storage_->data()) + offset_ * dtype_size(dtype_); }
  template <typename T> T* data() const { return static_cast<T*>(raw()); }

  // Contiguous sub-range [start, start+count) of the flattened tensor, as 1-D.
  Tensor slice_flat(int64_t start, int64_t count) const;
  // Same elements, new shape (numel must agree).
  Tensor reshape(Shape shape) const;
  void zero_();
  // Element-wise copy from a tensor of the same numel (converting dtypes
  // among f32/bf16/f16 when they differ).
  void copy_from(const Tensor& src);

 private:
  std::shared_ptr<Storage> storage_;
  int64_t offset_ = 0;
  Shape shape_;
  int64_t numel_ = 0;
  DType dtype_ = DType::F32;
};

}  // namespace meshtrain
