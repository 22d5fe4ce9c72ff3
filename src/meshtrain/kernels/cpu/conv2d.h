// 2-D convolution in NCHW f32 (kernels/image_shapes.h), forward and the two
// backward passes, and the same with 16-bit (bf16/f16) inputs and weights
// accumulating into f32. oneDNN where it is built in and has an
// implementation (onednn_conv2d.h, primitives cached per shape), else the
// double-accumulating reference (image_reference.h); 16-bit inputs without a
// oneDNN implementation (no AVX-512, f16, a capped ISA) are widened to f32.
#pragma once
#include <cstdint>
#include <string>

#include "meshtrain/core/half.h"
#include "meshtrain/kernels/cpu/onednn_conv2d.h"
#include "meshtrain/kernels/image_shapes.h"

namespace meshtrain::cpu {

// out (N, OC, OH, OW) = conv(inp, weight) [+ bias (OC), nullable: ResNet's
// convolutions have none]; overwritten.
void conv2d_forward(float* out, const float* inp, const float* weight, const float* bias,
                    const Conv2dShape& s);
// dinp (N, C, H, W): overwritten.
void conv2d_backward_data(float* dinp, const float* dout, const float* weight,
                          const Conv2dShape& s);
// dweight (OC, C, KH, KW) += ..., dbias (OC, nullable) += sum of dout over (N, OH, OW).
void conv2d_backward_weights(float* dweight, float* dbias, const float* dout, const float* inp,
                             const Conv2dShape& s);

// 16-bit operands (bit patterns in `fmt`), f32 outputs with the semantics
// above. The backward passes take dout already rounded to `fmt` (the
// table's to_half), as matmul_backward_half does; dbias sums that rounded dout.
void conv2d_forward_half(HalfFormat fmt, float* out, const uint16_t* inp, const uint16_t* weight,
                         const float* bias, const Conv2dShape& s);
void conv2d_backward_data_half(HalfFormat fmt, float* dinp, const uint16_t* dout,
                               const uint16_t* weight, const Conv2dShape& s);
void conv2d_backward_weights_half(HalfFormat fmt, float* dweight, float* dbias,
                                  const uint16_t* dout, const uint16_t* inp,
                                  const Conv2dShape& s);

// What runs: oneDNN in its own layouts (reordered at the boundaries), on
// plain NCHW, or (the default) each where it was faster: blocked for KxK
// kernels (3x3, 64 channels: ~1.4-1.9x), plain for 1x1, which on NCHW is a
// GEMM per image and ~1.4-2x slower once its channels are reordered
// (image_kernels_test's DISABLED_timing, AVX-512, one thread of a shared
// 2-core machine); each falls back as above. Reference forces
// the fallbacks (tests: the reference path and the widening path on a CPU
// oneDNN serves).
enum class ConvBackend { OneDnnAuto, OneDnnBlocked, OneDnnPlain, Reference };
inline constexpr ConvBackend kDefaultConvBackend = ConvBackend::OneDnnAuto;
void set_conv2d_backend(ConvBackend b);
// The path a pass takes for a problem: "onednn <impl>", "reference", or
// "widened to f32, then <the f32 path>" (tests and benchmarks report it).
std::string conv2d_path(ConvPass pass, ConvData data, const Conv2dShape& s);

}  // namespace meshtrain::cpu
