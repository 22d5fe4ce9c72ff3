// LayerNorm and RMSNorm on the GPU (semantics of kernels/cpu/layernorm.h,
// rmsnorm.h: dinp accumulates (+=), dweight/dbias accumulate in an order
// fixed by the shapes).
#pragma once
#include <cstdint>

#include "meshtrain/core/stream.h"

namespace meshtrain::cuda {

void layernorm_forward(Stream s, float* out, float* mean, float* rstd, const float* inp,
                       const float* weight, const float* bias, int64_t N, int64_t C);
void layernorm_backward(Stream s, float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean,
                        const float* rstd, int64_t N, int64_t C);
void rmsnorm_forward(Stream s, float* out, float* rstd, const float* inp, const float* weight,
                     int64_t N, int64_t C, float eps);
void rmsnorm_backward(Stream s, float* dinp, float* dweight, const float* dout, const float* inp,
                      const float* weight, const float* rstd, int64_t N, int64_t C);

}  // namespace meshtrain::cuda
