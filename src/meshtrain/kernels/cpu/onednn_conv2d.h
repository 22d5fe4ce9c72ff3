// oneDNN's direct convolution, one primitive cached per (pass, data type,
// shape, bias, layout choice, thread count). The caller's memory is plain
// NCHW / OIHW. `blocked`: oneDNN picks its own layouts (format_tag::any,
// e.g. nChw16c), and operands are reordered to them and the output back, in
// per-thread scratch; otherwise it runs on the plain layouts (often im2col +
// GEMM). Only with oneDNN (MESHTRAIN_HAVE_DNNL); conv2d.h picks it or the
// reference.
#pragma once
#include <cstdint>
#include <string>

#include "meshtrain/kernels/image_shapes.h"

namespace meshtrain::cpu {

enum class ConvPass { Forward, BackwardData, BackwardWeights };
// The operands' type: the inputs (src, weights, diff_dst) are f32, bf16 or
// f16; outputs (dst, diff_src, diff_weights, bias) are always f32.
enum class ConvData { F32, BF16, F16 };

#if defined(MESHTRAIN_HAVE_DNNL)
// Runs one pass and returns true, or returns false (and does nothing) when
// oneDNN has no implementation for it; for 16-bit inputs its slow reference
// implementation counts as none (widening to f32 is faster). Operands:
//   Forward:         a = src, b = weights, out = dst, bias = bias (in; nullable)
//   BackwardData:    a = diff_dst, b = weights, out = diff_src
//   BackwardWeights: a = src, b = diff_dst, out = diff_weights, bias = diff_bias
//                    (both overwritten; diff_bias nullable)
bool onednn_conv2d(ConvPass pass, ConvData data, const Conv2dShape& s, bool blocked,
                   const void* a, const void* b, float* out, float* bias);
// The implementation oneDNN picked for that problem ("jit:avx512_core", ...),
// with " (oneDNN's layouts, reordered)" when it reorders; or "none".
std::string onednn_conv2d_impl(ConvPass pass, ConvData data, const Conv2dShape& s, bool blocked,
                               bool bias);
#endif

}  // namespace meshtrain::cpu
