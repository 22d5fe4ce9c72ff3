#include "meshtrain/kernels/cpu/pooling.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "meshtrain/core/error.h"

namespace meshtrain::cpu {

namespace {
void check_shape(const char* op, const Pool2dShape& s) {
  MT_CHECK(s.N > 0 && s.C > 0 && s.H > 0 && s.W > 0 && s.KH > 0 && s.KW > 0 && s.stride_h > 0 &&
               s.stride_w > 0 && s.pad_h >= 0 && s.pad_w >= 0 && 2 * s.pad_h <= s.KH &&
               2 * s.pad_w <= s.KW && s.H + 2 * s.pad_h >= s.KH && s.W + 2 * s.pad_w >= s.KW,
           "{}: bad shape N={} C={} H={} W={} K={}x{} stride={}x{} pad={}x{} (pad at most half "
           "the kernel)", op, s.N, s.C, s.H, s.W, s.KH, s.KW, s.stride_h, s.stride_w, s.pad_h,
           s.pad_w);
}
}  // namespace

void max_pool2d_forward(float* out, int32_t* argmax, const float* inp, const Pool2dShape& s) {
  check_shape("max_pool2d", s);
  const int64_t OH = s.OH(), OW = s.OW();
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t n = 0; n < s.N; ++n)
    for (int64_t c = 0; c < s.C; ++c) {
      const float* x = inp + (n * s.C + c) * s.H * s.W;
      float* y = out + (n * s.C + c) * OH * OW;
      int32_t* idx = argmax + (n * s.C + c) * OH * OW;
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          const int64_t h0 = oh * s.stride_h - s.pad_h, w0 = ow * s.stride_w - s.pad_w;
          float best = -INFINITY;
          int64_t at = -1;
          for (int64_t h = std::max<int64_t>(h0, 0); h < std::min(h0 + s.KH, s.H); ++h)
            for (int64_t w = std::max<int64_t>(w0, 0); w < std::min(w0 + s.KW, s.W); ++w) {
              const float v = x[h * s.W + w];
              if (at < 0 || v > best || (std::isnan(v) && !std::isnan(best))) best = v, at = h * s.W + w;
            }
          y[oh * OW + ow] = best;
          idx[oh * OW + ow] = static_cast<int32_t>(at);
        }
    }
}

void max_pool2d_backward(float* dinp, const float* dout, const int32_t* argmax,
                         const Pool2dShape& s) {
  check_shape("max_pool2d", s);
  const int64_t OH = s.OH(), OW = s.OW(), HW = s.H * s.W;
  // One plane per task: the scatter's targets are that task's own.
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t n = 0; n < s.N; ++n)
    for (int64_t c = 0; c < s.C; ++c) {
      float* dx = dinp + (n * s.C + c) * HW;
      const float* dy = dout + (n * s.C + c) * OH * OW;
      const int32_t* idx = argmax + (n * s.C + c) * OH * OW;
      std::memset(dx, 0, sizeof(float) * HW);
      for (int64_t o = 0; o < OH * OW; ++o) dx[idx[o]] += dy[o];
    }
}

void avg_pool2d_forward(float* out, const float* inp, const Pool2dShape& s) {
  check_shape("avg_pool2d", s);
  const int64_t OH = s.OH(), OW = s.OW();
  const float inv = 1.0f / static_cast<float>(s.KH * s.KW);  // padding counts
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t n = 0; n < s.N; ++n)
    for (int64_t c = 0; c < s.C; ++c) {
      const float* x = inp + (n * s.C + c) * s.H * s.W;
      float* y = out + (n * s.C + c) * OH * OW;
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          const int64_t h0 = oh * s.stride_h - s.pad_h, w0 = ow * s.stride_w - s.pad_w;
          float acc = 0.0f;
          for (int64_t h = std::max<int64_t>(h0, 0); h < std::min(h0 + s.KH, s.H); ++h)
            for (int64_t w = std::max<int64_t>(w0, 0); w < std::min(w0 + s.KW, s.W); ++w)
              acc += x[h * s.W + w];
          y[oh * OW + ow] = acc * inv;
        }
    }
}

void avg_pool2d_backward(float* dinp, const float* dout, const Pool2dShape& s) {
  check_shape("avg_pool2d", s);
  const int64_t OH = s.OH(), OW = s.OW(), HW = s.H * s.W;
  const float inv = 1.0f / static_cast<float>(s.KH * s.KW);
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t n = 0; n < s.N; ++n)
    for (int64_t c = 0; c < s.C; ++c) {
      float* dx = dinp + (n * s.C + c) * HW;
      const float* dy = dout + (n * s.C + c) * OH * OW;
      std::memset(dx, 0, sizeof(float) * HW);
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          const int64_t h0 = oh * s.stride_h - s.pad_h, w0 = ow * s.stride_w - s.pad_w;
          const float g = dy[oh * OW + ow] * inv;
          for (int64_t h = std::max<int64_t>(h0, 0); h < std::min(h0 + s.KH, s.H); ++h)
            for (int64_t w = std::max<int64_t>(w0, 0); w < std::min(w0 + s.KW, s.W); ++w)
              dx[h * s.W + w] += g;
        }
    }
}

void global_avg_pool_forward(float* out, const float* inp, int64_t N, int64_t C, int64_t HW) {
#pragma omp parallel for schedule(static) if (N * C * HW > 16384)
  for (int64_t p = 0; p < N * C; ++p) {
    const float* x = inp + p * HW;
    double acc = 0;  // double: a 7x7 plane is short, but 224x224 is not
#pragma omp simd reduction(+ : acc)
    for (int64_t i = 0; i < HW; ++i) acc += x[i];
    out[p] = static_cast<float>(acc / HW);
  }
}

void global_avg_pool_backward(float* dinp, const float* dout, int64_t N, int64_t C, int64_t HW) {
#pragma omp parallel for schedule(static) if (N * C * HW > 16384)
  for (int64_t p = 0; p < N * C; ++p) {
    const float g = dout[p] / static_cast<float>(HW);
    float* dx = dinp + p * HW;
#pragma omp simd
    for (int64_t i = 0; i < HW; ++i) dx[i] = g;
  }
}

}  // namespace meshtrain::cpu
