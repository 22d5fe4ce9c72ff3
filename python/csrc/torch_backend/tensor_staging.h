// How torch tensors meet meshtrain's communicator: dtype and reduction
// mapping, and the staging that gives every collective one contiguous buffer
// (a non-contiguous tensor is copied in and, after the operation, back out;
// a list of tensors is packed into one and unpacked after).
#pragma once
#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <functional>
#include <vector>

#include "meshtrain/comm/types.h"

namespace meshtrain::torch_backend {

// The meshtrain dtype a reduction of `t` runs in; throws for dtypes no
// reduction is defined on here (bool, uint8, int8, int16, complex).
DType reduction_dtype(const at::Tensor& t, const char* op);
// Sum, avg, min, max, product; bitwise and premultiplied sums throw.
comm::ReduceOp reduction(const c10d::ReduceOp& op, const char* what);
// A dense CPU tensor, or a clear error naming the op.
void check_cpu_dense(const at::Tensor& t, const char* op);
// Every tensor of `ts` has `like`'s dtype and number of elements.
void check_same_shape(const std::vector<at::Tensor>& ts, const at::Tensor& like, const char* op);
size_t byte_size(const at::Tensor& t);

// A contiguous buffer standing for a user's tensor or tensors, and what
// must be done after the operation to deliver the result to them.
struct Staged {
  at::Tensor buffer;
  std::function<void()> deliver;  // empty when the operation wrote in place
};
// `t` itself when contiguous; else a contiguous copy, copied back after.
Staged stage(const at::Tensor& t, bool copy_back);
// The tensors of `ts` side by side in one buffer (filled from them when
// `fill`), and unpacked into them after when `unpack`.
Staged pack(const std::vector<at::Tensor>& ts, bool fill, bool unpack);

}  // namespace meshtrain::torch_backend
