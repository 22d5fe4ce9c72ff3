#include "tensor_staging.h"

#include <fmt/format.h>

namespace meshtrain::torch_backend {

DType reduction_dtype(const at::Tensor& t, const char* op) {
  switch (t.scalar_type()) {
    case at::kFloat: return DType::F32;
    case at::kDouble: return DType::F64;
    case at::kBFloat16: return DType::BF16;
    case at::kHalf: return DType::F16;
    case at::kInt: return DType::I32;
    case at::kLong: return DType::I64;
    default:
      TORCH_CHECK(false, fmt::format("meshtrain backend: {} cannot reduce {} tensors (float32, float64, "
                                     "bfloat16, float16, int32, int64 reduce; every dtype moves)",
                                     op, std::string(c10::toString(t.scalar_type()))));
  }
}

comm::ReduceOp reduction(const c10d::ReduceOp& op, const char* what) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM: return comm::ReduceOp::Sum;
    case c10d::ReduceOp::AVG: return comm::ReduceOp::Avg;
    case c10d::ReduceOp::MIN: return comm::ReduceOp::Min;
    case c10d::ReduceOp::MAX: return comm::ReduceOp::Max;
    case c10d::ReduceOp::PRODUCT: return comm::ReduceOp::Product;
    default:
      TORCH_CHECK(false, fmt::format("meshtrain backend: {} supports SUM, AVG, MIN, MAX and PRODUCT, "
                                     "not the bitwise or premultiplied reductions", what));
  }
}

void check_cpu_dense(const at::Tensor& t, const char* op) {
  TORCH_CHECK(t.device().is_cpu(), fmt::format("meshtrain backend: {} got a tensor on {}; it moves CPU "
                                               "tensors (use \"cpu:meshtrain,cuda:nccl\" for both)",
                                               op, t.device().str()));
  TORCH_CHECK(t.layout() == at::kStrided, fmt::format("meshtrain backend: {} takes dense tensors", op));
}

void check_same_shape(const std::vector<at::Tensor>& ts, const at::Tensor& like, const char* op) {
  for (const at::Tensor& t : ts) {
    check_cpu_dense(t, op);
    TORCH_CHECK(t.scalar_type() == like.scalar_type() && t.numel() == like.numel(),
                fmt::format("meshtrain backend: {} needs tensors of one dtype and size ({} x {} here, "
                            "{} x {} expected)", op, std::string(c10::toString(t.scalar_type())),
                            t.numel(), std::string(c10::toString(like.scalar_type())), like.numel()));
  }
}

size_t byte_size(const at::Tensor& t) { return static_cast<size_t>(t.numel()) * t.element_size(); }

Staged stage(const at::Tensor& t, bool copy_back) {
  if (t.is_contiguous()) return {t, {}};
  at::Tensor buf = t.contiguous();
  Staged s{buf, {}};
  if (copy_back) s.deliver = [t, buf]() mutable { t.copy_(buf); };
  return s;
}

Staged pack(const std::vector<at::Tensor>& ts, bool fill, bool unpack) {
  int64_t total = 0;
  for (const at::Tensor& t : ts) total += t.numel();
  at::Tensor buf = at::empty({total}, ts.front().options().memory_format(at::MemoryFormat::Contiguous));
  if (fill) {
    int64_t at = 0;
    for (const at::Tensor& t : ts) {
      buf.narrow(0, at, t.numel()).copy_(t.reshape({-1}));
      at += t.numel();
    }
  }
  Staged s{buf, {}};
  if (unpack)
    s.deliver = [ts, buf]() mutable {
      int64_t at = 0;
      for (const at::Tensor& t : ts) {
        t.copy_(buf.narrow(0, at, t.numel()).view(t.sizes()));
        at += t.numel();
      }
    };
  return s;
}

}  // namespace meshtrain::torch_backend
