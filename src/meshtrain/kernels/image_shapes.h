// Shapes of the image-model ops (convolution, pooling) in the kernel table,
// shared by every backend. Tensors are plain row-major NCHW f32: element
// (n, c, h, w) at ((n*C + c)*H + h)*W + w; a convolution's weight is
// (OC, C, KH, KW). Output sizes are PyTorch's (floor, no dilation, no groups).
#pragma once
#include <cstdint>

namespace meshtrain {

struct Conv2dShape {
  int64_t N = 1, C = 1, H = 1, W = 1;  // input
  int64_t OC = 1, KH = 1, KW = 1;      // output channels, kernel
  int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0;
  int64_t OH() const { return (H + 2 * pad_h - KH) / stride_h + 1; }
  int64_t OW() const { return (W + 2 * pad_w - KW) / stride_w + 1; }
  int64_t in_numel() const { return N * C * H * W; }
  int64_t out_numel() const { return N * OC * OH() * OW(); }
  int64_t weight_numel() const { return OC * C * KH * KW; }
};

// Max and average pooling over KH x KW windows of each (n, c) plane.
struct Pool2dShape {
  int64_t N = 1, C = 1, H = 1, W = 1;
  int64_t KH = 1, KW = 1;
  int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0;
  int64_t OH() const { return (H + 2 * pad_h - KH) / stride_h + 1; }
  int64_t OW() const { return (W + 2 * pad_w - KW) / stride_w + 1; }
  int64_t in_numel() const { return N * C * H * W; }
  int64_t out_numel() const { return N * C * OH() * OW(); }
};

}  // namespace meshtrain
