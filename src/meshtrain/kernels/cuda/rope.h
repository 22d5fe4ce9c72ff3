// Rotary position embeddings on the GPU (semantics of kernels/cpu/rope.h;
// the RopeView's cos/sin tables are in device memory).
#pragma once
#include <cstdint>

#include "meshtrain/core/stream.h"
#include "meshtrain/kernels/rope_view.h"

namespace meshtrain::cuda {

void rope_forward(Stream s, float* x, int64_t B, int64_t T, int64_t nheads, int64_t hd,
                  int64_t row_stride, const RopeView& table);
void rope_backward(Stream s, float* dx, int64_t B, int64_t T, int64_t nheads, int64_t hd,
                   int64_t row_stride, const RopeView& table);

}  // namespace meshtrain::cuda
