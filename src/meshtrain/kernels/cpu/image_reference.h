// Plain C++ convolutions in NCHW (kernels/image_shapes.h), accumulating in
// double: what conv2d.h runs where oneDNN is not built in (the aarch64
// cross-build) or has no implementation, and the tests' reference for it.
// Parallel over independent outputs (OpenMP), each sum in a fixed order.
#pragma once
#include <cstdint>

#include "meshtrain/kernels/image_shapes.h"

namespace meshtrain::cpu {

// out (N, OC, OH, OW) = inp * weight [+ bias (OC), nullable]; overwritten.
void conv2d_forward_reference(float* out, const float* inp, const float* weight,
                              const float* bias, const Conv2dShape& s);
// dinp (N, C, H, W) = d(out)/d(inp)^T dout; overwritten.
void conv2d_backward_data_reference(float* dinp, const float* dout, const float* weight,
                                    const Conv2dShape& s);
// dweight (OC, C, KH, KW) += ..., dbias (OC, nullable) += sum of dout.
void conv2d_backward_weights_reference(float* dweight, float* dbias, const float* dout,
                                       const float* inp, const Conv2dShape& s);

}  // namespace meshtrain::cpu
