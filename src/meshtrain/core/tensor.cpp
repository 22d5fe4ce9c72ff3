#include "meshtrain/core/tensor.h"

#include <cstring>

#include "meshtrain/core/device_runtime.h"
#include "meshtrain/core/half.h"

namespace meshtrain {

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) {
    MT_CHECK(d >= 0, "negative dimension {} in shape {}", d, shape_str(s));
    n *= d;
  }
  return n;
}

std::string shape_str(const Shape& s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + ")";
}

Tensor Tensor::zeros(Shape shape, DType dtype, MemCategory cat, Device device) {
  int64_t n = shape_numel(shape);
  auto st = Storage::allocate(static_cast<size_t>(n) * dtype_size(dtype), cat, device);
  return Tensor(std::move(st), 0, std::move(shape), dtype);
}

Tensor::Tensor(std::shared_ptr<Storage> storage, int64_t elem_offset, Shape shape, DType dtype)
    : storage_(std::move(storage)), offset_(elem_offset), shape_(std::move(shape)), dtype_(dtype) {
  numel_ = shape_numel(shape_);
  size_t end = static_cast<size_t>(offset_ + numel_) * dtype_size(dtype_);
  MT_CHECK(storage_ && end <= storage_->bytes(),
           "tensor view {} at element {} runs past its storage of {} bytes", shape_str(shape_),
           offset_, storage_ ? storage_->bytes() : 0);
}

Tensor Tensor::slice_flat(int64_t start, int64_t count) const {
  MT_CHECK(start >= 0 && count >= 0 && start + count <= numel_,
           "slice [{}, {}) out of range for tensor of {} elements", start, start + count, numel_);
  return Tensor(storage_, offset_ + start, {count}, dtype_);
}

Tensor Tensor::reshape(Shape shape) const {
  MT_CHECK(shape_numel(shape) == numel_, "cannot reshape {} to {}", shape_str(shape_),
           shape_str(shape));
  return Tensor(storage_, offset_, std::move(shape), dtype_);
}

void Tensor::zero_() {
  if (device().is_cpu()) return static_cast<void>(std::memset(raw(), 0, nbytes()));
  runtime_for(device()).fill_zero(raw(), nbytes(), default_stream(device()));
}

void Tensor::copy_from(const Tensor& src) {
  MT_CHECK(src.numel() == numel_, "copy of {} elements into a tensor of {}", src.numel(), numel_);
  if (!device().is_cpu() || !src.device().is_cpu()) {
    // Between devices: the same dtype, queued on the device's default stream
    // (a conversion runs on the device that holds both, through its kernels).
    MT_CHECK(src.dtype() == dtype_, "copy {} -> {} converts {} to {}: convert on one device first",
             src.device().str(), device().str(), dtype_name(src.dtype()), dtype_name(dtype_));
    const Device d = device().is_cpu() ? src.device() : device();
    runtime_for(d).copy(raw(), device(), src.raw(), src.device(), nbytes(), default_stream(d));
    return;
  }
  if (src.dtype() == dtype_) {
    std::memmove(raw(), src.raw(), nbytes());
    return;
  }
  auto is_float = [](DType t) { return t == DType::F32 || t == DType::BF16 || t == DType::F16; };
  MT_CHECK(is_float(src.dtype()) && is_float(dtype_), "no conversion from {} to {}",
           dtype_name(src.dtype()), dtype_name(dtype_));
  // Route through f32: straight into an f32 destination (no temporary, so
  // a loader widening a 16-bit tensor holds no hidden copy of it).
  const size_t n = static_cast<size_t>(numel_);
  std::vector<float> tmp;
  const float* f;
  if (src.dtype() == DType::F32) {
    f = src.data<float>();
  } else if (dtype_ == DType::F32) {
    if (src.dtype() == DType::BF16) bf16_to_f32(src.data<uint16_t>(), data<float>(), n);
    else f16_to_f32(src.data<uint16_t>(), data<float>(), n);
    return;
  } else {
    tmp.resize(n);
    if (src.dtype() == DType::BF16) bf16_to_f32(src.data<uint16_t>(), tmp.data(), n);
    else f16_to_f32(src.data<uint16_t>(), tmp.data(), n);
    f = tmp.data();
  }
  if (dtype_ == DType::F32) std::memcpy(raw(), f, n * 4);
  else if (dtype_ == DType::BF16) f32_to_bf16(f, data<uint16_t>(), n);
  else f32_to_f16(f, data<uint16_t>(), n);
}

}  // namespace meshtrain
