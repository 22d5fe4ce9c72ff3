// Element-wise reduction kernels used by every algorithm. bf16 and f16 are
// accumulated in f32 and rounded once per call; Avg is reduced as Sum and
// divided by the group size once the sum is complete (scale_avg).
#pragma once
#include <cstddef>

#include "meshtrain/comm/types.h"

namespace meshtrain::comm {

// dst[i] = dst[i] (op) src[i]. Avg behaves as Sum.
void reduce_into(void* dst, const void* src, size_t count, DType dtype, ReduceOp op);

// dst[i] = srcs[0][i] (op) ... (op) srcs[n-1][i]; dst may alias any source.
// Half types accumulate all n inputs in f32 and round once.
void reduce_many(void* dst, const void* const* srcs, int n, size_t count, DType dtype,
                 ReduceOp op);

// buf[i] /= divisor (integers truncate toward zero), for ReduceOp::Avg.
void scale_avg(void* buf, size_t count, DType dtype, int divisor);

// Throws UsageError unless `dtype` can be reduced (f32, f64, bf16, f16, i32, i64).
void check_reducible(DType dtype);

}  // namespace meshtrain::comm
