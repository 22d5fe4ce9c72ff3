// isa-levels: scalar avx2 avx512
#include "meshtrain/comm/reduce.h"
#include "meshtrain/core/isa_dispatch.h"

#include <algorithm>
#include <cstdint>

#include "meshtrain/core/half.h"

namespace meshtrain::comm::MT_ISA_NS {

namespace {


// Separate loops per op so the compiler vectorises each.
template <typename T>
void reduce_into_t(T* __restrict dst, const T* __restrict src, size_t n, ReduceOp op) {
  if (op == ReduceOp::Max) {
    for (size_t i = 0; i < n; ++i) dst[i] = dst[i] > src[i] ? dst[i] : src[i];
  } else if (op == ReduceOp::Min) {
    for (size_t i = 0; i < n; ++i) dst[i] = dst[i] < src[i] ? dst[i] : src[i];
  } else if (op == ReduceOp::Product) {
    for (size_t i = 0; i < n; ++i) dst[i] *= src[i];
  } else {
    for (size_t i = 0; i < n; ++i) dst[i] += src[i];
  }
}

// 16-bit inputs are widened and results rounded in blocks with the bulk
// conversions (core/half.h: vectorized at the dispatch level, the same bits
// as the scalar ones), so the combine loop between them vectorizes too: one
// branchy conversion per element kept bf16 reductions at ~60% of f32's speed.
using BulkToF32 = void (*)(const uint16_t*, float*, size_t);
using BulkFromF32 = void (*)(const float*, uint16_t*, size_t);
constexpr size_t kHalfBlock = 1024;  // two f32 blocks stay in L1

template <BulkToF32 to, BulkFromF32 from>
void reduce_into_half(uint16_t* dst, const uint16_t* src, size_t n, ReduceOp op) {
  float a[kHalfBlock], b[kHalfBlock];
  for (size_t at = 0; at < n; at += kHalfBlock) {
    const size_t m = std::min(kHalfBlock, n - at);
    to(dst + at, a, m);
    to(src + at, b, m);
    reduce_into_t(a, b, m, op);
    from(a, dst + at, m);
  }
}

template <typename T>
void reduce_many_t(T* dst, const void* const* srcs, int k, size_t n, ReduceOp op) {
  // Two inputs at a time into dst keeps every pass a streaming, vectorised loop.
  if (k == 1) {
    if (dst != srcs[0]) std::copy_n(static_cast<const T*>(srcs[0]), n, dst);
    return;
  }
  constexpr size_t kBlock = 2048;  // stays in L1 while all k inputs are folded in
  for (size_t b = 0; b < n; b += kBlock) {
    size_t m = std::min(kBlock, n - b);
    T acc[kBlock];
    const T* s0 = static_cast<const T*>(srcs[0]) + b;
    const T* s1 = static_cast<const T*>(srcs[1]) + b;
    if (op == ReduceOp::Max) {
      for (size_t i = 0; i < m; ++i) acc[i] = s0[i] > s1[i] ? s0[i] : s1[i];
    } else if (op == ReduceOp::Min) {
      for (size_t i = 0; i < m; ++i) acc[i] = s0[i] < s1[i] ? s0[i] : s1[i];
    } else if (op == ReduceOp::Product) {
      for (size_t i = 0; i < m; ++i) acc[i] = s0[i] * s1[i];
    } else {
      for (size_t i = 0; i < m; ++i) acc[i] = s0[i] + s1[i];
    }
    for (int s = 2; s < k; ++s) reduce_into_t(acc, static_cast<const T*>(srcs[s]) + b, m, op);
    std::copy_n(acc, m, dst + b);
  }
}

template <BulkToF32 to, BulkFromF32 from>
void reduce_many_half(uint16_t* dst, const void* const* srcs, int k, size_t n, ReduceOp op) {
  float acc[kHalfBlock], in[kHalfBlock];
  for (size_t at = 0; at < n; at += kHalfBlock) {
    const size_t m = std::min(kHalfBlock, n - at);
    to(static_cast<const uint16_t*>(srcs[0]) + at, acc, m);
    for (int s = 1; s < k; ++s) {
      to(static_cast<const uint16_t*>(srcs[s]) + at, in, m);
      reduce_into_t(acc, in, m, op);
    }
    from(acc, dst + at, m);
  }
}

constexpr BulkToF32 bf16_in = bf16_to_f32;
constexpr BulkFromF32 bf16_out = f32_to_bf16;
constexpr BulkToF32 f16_in = f16_to_f32;
constexpr BulkFromF32 f16_out = f32_to_f16;

template <BulkToF32 to, BulkFromF32 from>
void scale_half(uint16_t* p, size_t n, int d) {
  float a[kHalfBlock];
  for (size_t at = 0; at < n; at += kHalfBlock) {
    const size_t m = std::min(kHalfBlock, n - at);
    to(p + at, a, m);
    for (size_t i = 0; i < m; ++i) a[i] /= static_cast<float>(d);
    from(a, p + at, m);
  }
}

template <typename T>
void scale_t(T* p, size_t n, int d) {
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<T>(p[i] / static_cast<T>(d));
}

}  // namespace


void reduce_into(void* dst, const void* src, size_t n, DType dtype, ReduceOp op) {
  switch (dtype) {
    case DType::F32: return reduce_into_t(static_cast<float*>(dst), static_cast<const float*>(src), n, op);
    case DType::F64: return reduce_into_t(static_cast<double*>(dst), static_cast<const double*>(src), n, op);
    case DType::I32: return reduce_into_t(static_cast<int32_t*>(dst), static_cast<const int32_t*>(src), n, op);
    case DType::I64: return reduce_into_t(static_cast<int64_t*>(dst), static_cast<const int64_t*>(src), n, op);
    case DType::BF16:
      return reduce_into_half<bf16_in, bf16_out>(static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(src), n, op);
    case DType::F16:
      return reduce_into_half<f16_in, f16_out>(static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(src), n, op);
    default: check_reducible(dtype);
  }
}

void reduce_many(void* dst, const void* const* srcs, int k, size_t n, DType dtype, ReduceOp op) {
  switch (dtype) {
    case DType::F32: return reduce_many_t(static_cast<float*>(dst), srcs, k, n, op);
    case DType::F64: return reduce_many_t(static_cast<double*>(dst), srcs, k, n, op);
    case DType::I32: return reduce_many_t(static_cast<int32_t*>(dst), srcs, k, n, op);
    case DType::I64: return reduce_many_t(static_cast<int64_t*>(dst), srcs, k, n, op);
    case DType::BF16: return reduce_many_half<bf16_in, bf16_out>(static_cast<uint16_t*>(dst), srcs, k, n, op);
    case DType::F16: return reduce_many_half<f16_in, f16_out>(static_cast<uint16_t*>(dst), srcs, k, n, op);
    default: check_reducible(dtype);
  }
}

void scale_avg(void* buf, size_t n, DType dtype, int d) {
  if (d == 1) return;
  switch (dtype) {
    case DType::F32: return scale_t(static_cast<float*>(buf), n, d);
    case DType::F64: return scale_t(static_cast<double*>(buf), n, d);
    case DType::I32: return scale_t(static_cast<int32_t*>(buf), n, d);
    case DType::I64: return scale_t(static_cast<int64_t*>(buf), n, d);
    case DType::BF16: return scale_half<bf16_in, bf16_out>(static_cast<uint16_t*>(buf), n, d);
    case DType::F16: return scale_half<f16_in, f16_out>(static_cast<uint16_t*>(buf), n, d);
    default: check_reducible(dtype);
  }
}

}  // namespace meshtrain::comm::MT_ISA_NS

namespace meshtrain::comm {

#if MT_ISA_BASELINE
void check_reducible(DType dtype) {
  switch (dtype) {
    case DType::F32: case DType::F64: case DType::BF16: case DType::F16:
    case DType::I32: case DType::I64: return;
    default:
      throw UsageError(fmt::format("cannot reduce dtype {} (f32, f64, bf16, f16, i32, i64)",
                                   dtype_name(dtype)));
  }
}

// The public entry points: the variant for active_isa() (core/isa_dispatch.h).
MT_ISA_DECLARE(void reduce_into(void* dst, const void* src, size_t n, DType dtype, ReduceOp op))
MT_ISA_DECLARE(void reduce_many(void* dst, const void* const* srcs, int k, size_t n, DType dtype, ReduceOp op))
MT_ISA_DECLARE(void scale_avg(void* buf, size_t n, DType dtype, int d))
void reduce_into(void* dst, const void* src, size_t n, DType dtype, ReduceOp op) {
  MT_ISA_PICK(reduce_into)(dst, src, n, dtype, op);
}
void reduce_many(void* dst, const void* const* srcs, int k, size_t n, DType dtype, ReduceOp op) {
  MT_ISA_PICK(reduce_many)(dst, srcs, k, n, dtype, op);
}
void scale_avg(void* buf, size_t n, DType dtype, int d) {
  MT_ISA_PICK(scale_avg)(buf, n, dtype, d);
}
#endif
}  // namespace meshtrain::comm
