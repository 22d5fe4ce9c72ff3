// Pooling over the (H, W) planes of NCHW f32 (kernels/image_shapes.h), with
// PyTorch's defaults: floor output sizes (ceil_mode false), max pooling pads
// with -inf, average pooling counts the padding (count_include_pad true: the
// divisor is always KH*KW). Plain OpenMP loops over (n, c) planes.
#pragma once
#include <cstdint>

#include "meshtrain/kernels/image_shapes.h"

namespace meshtrain::cpu {

// out (N, C, OH, OW); argmax (same shape) = h*W + w of the maximum in its
// input plane (PyTorch's indices): the first in row order on ties, a NaN
// wins. Kept for backward, which routes each gradient there. Needs
// pad <= kernel/2 (as PyTorch), so each window holds an input element.
void max_pool2d_forward(float* out, int32_t* argmax, const float* inp, const Pool2dShape& s);
// dinp (N, C, H, W): overwritten; overlapping windows add.
void max_pool2d_backward(float* dinp, const float* dout, const int32_t* argmax,
                         const Pool2dShape& s);
void avg_pool2d_forward(float* out, const float* inp, const Pool2dShape& s);
// dinp overwritten.
void avg_pool2d_backward(float* dinp, const float* dout, const Pool2dShape& s);
// out (N, C) = mean over each plane of HW elements; backward: dinp = dout / HW
// (overwritten).
void global_avg_pool_forward(float* out, const float* inp, int64_t N, int64_t C, int64_t HW);
void global_avg_pool_backward(float* dinp, const float* dout, int64_t N, int64_t C, int64_t HW);

}  // namespace meshtrain::cpu
