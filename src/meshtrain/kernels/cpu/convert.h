// Bulk f32 <-> 16-bit conversions for the mixed-precision model, split over
// the OpenMP threads (core/half.h has the single-thread vector code and the
// scalar definitions the results match bit for bit).
#pragma once
#include <cstdint>

#include "meshtrain/kernels/cpu/gemm_bf16.h"

namespace meshtrain::cpu {

void to_half(Half fmt, const float* in, uint16_t* out, int64_t n);
void from_half(Half fmt, const uint16_t* in, float* out, int64_t n);

}  // namespace meshtrain::cpu
