// Elementwise ops, reductions, precision conversions and the optimizer step
// on the GPU (kernel_table.h; semantics of kernels/cpu/elementwise.h,
// reduce.h, convert.h, adamw.h, sgd.h, lamb.h).
#pragma once
#include <cstdint>

#include "meshtrain/core/half.h"
#include "meshtrain/core/stream.h"
#include "meshtrain/kernels/adamw_hyper.h"
#include "meshtrain/kernels/optimizer_hyper.h"

namespace meshtrain::cuda {

// Bit for bit core/half.h's scalar conversions (round to nearest even, NaN
// kept NaN with its upper payload, subnormals exact).
void to_half(Stream s, HalfFormat fmt, const float* in, uint16_t* out, int64_t n);
void from_half(Stream s, HalfFormat fmt, const uint16_t* in, float* out, int64_t n);

void copy(Stream s, float* out, const float* a, int64_t n);
void add_inplace(Stream s, float* out, const float* a, int64_t n);
// Sum of squares in double over 1024 fixed chunks (an order fixed by n
// alone); waits for the stream.
double sum_squares(Stream s, const float* x, int64_t n);

void adamw_step(Stream s, float* param, const float* grad, float* m, float* v, int64_t n,
                const AdamWHyper& h);
void sgd_step(Stream s, float* param, const float* grad, float* buf, int64_t n, const SgdHyper& h);
// The update's squares in double over 1024 fixed chunks as sum_squares; waits.
double lamb_moments(Stream s, const float* grad, float* m, float* v, const float* param, int64_t n,
                    const LambHyper& h);
void lamb_apply(Stream s, float* param, const float* m, const float* v, int64_t n,
                const LambHyper& h, float step_size);

// Pitched device-to-device copy (kernel_table.h's copy_2d).
void copy_2d(Stream s, void* dst, int64_t dst_pitch, const void* src, int64_t src_pitch,
             int64_t row_bytes, int64_t rows);

}  // namespace meshtrain::cuda
