#include "meshtrain/kernels/cpu/image_reference.h"

namespace meshtrain::cpu {

void conv2d_forward_reference(float* out, const float* inp, const float* weight,
                              const float* bias, const Conv2dShape& s) {
  const int64_t OH = s.OH(), OW = s.OW();
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t n = 0; n < s.N; ++n)
    for (int64_t oc = 0; oc < s.OC; ++oc)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          double acc = bias ? bias[oc] : 0.0;
          for (int64_t c = 0; c < s.C; ++c)
            for (int64_t kh = 0; kh < s.KH; ++kh) {
              const int64_t h = oh * s.stride_h - s.pad_h + kh;
              if (h < 0 || h >= s.H) continue;
              for (int64_t kw = 0; kw < s.KW; ++kw) {
                const int64_t w = ow * s.stride_w - s.pad_w + kw;
                if (w < 0 || w >= s.W) continue;
                acc += double(inp[((n * s.C + c) * s.H + h) * s.W + w]) *
                       weight[((oc * s.C + c) * s.KH + kh) * s.KW + kw];
              }
            }
          out[((n * s.OC + oc) * OH + oh) * OW + ow] = static_cast<float>(acc);
        }
}

void conv2d_backward_data_reference(float* dinp, const float* dout, const float* weight,
                                    const Conv2dShape& s) {
  const int64_t OH = s.OH(), OW = s.OW();
  // Gathered per input element (no scatter, so no races): the outputs whose
  // window covers (h, w) are those with oh*stride = h + pad - kh.
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t n = 0; n < s.N; ++n)
    for (int64_t c = 0; c < s.C; ++c)
      for (int64_t h = 0; h < s.H; ++h)
        for (int64_t w = 0; w < s.W; ++w) {
          double acc = 0.0;
          for (int64_t oc = 0; oc < s.OC; ++oc)
            for (int64_t kh = 0; kh < s.KH; ++kh) {
              const int64_t th = h + s.pad_h - kh;
              if (th < 0 || th % s.stride_h != 0 || th / s.stride_h >= OH) continue;
              for (int64_t kw = 0; kw < s.KW; ++kw) {
                const int64_t tw = w + s.pad_w - kw;
                if (tw < 0 || tw % s.stride_w != 0 || tw / s.stride_w >= OW) continue;
                acc += double(dout[((n * s.OC + oc) * OH + th / s.stride_h) * OW + tw / s.stride_w]) *
                       weight[((oc * s.C + c) * s.KH + kh) * s.KW + kw];
              }
            }
          dinp[((n * s.C + c) * s.H + h) * s.W + w] = static_cast<float>(acc);
        }
}

void conv2d_backward_weights_reference(float* dweight, float* dbias, const float* dout,
                                       const float* inp, const Conv2dShape& s) {
  const int64_t OH = s.OH(), OW = s.OW();
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t oc = 0; oc < s.OC; ++oc)
    for (int64_t c = 0; c < s.C; ++c)
      for (int64_t kh = 0; kh < s.KH; ++kh)
        for (int64_t kw = 0; kw < s.KW; ++kw) {
          double acc = 0.0;
          for (int64_t n = 0; n < s.N; ++n)
            for (int64_t oh = 0; oh < OH; ++oh) {
              const int64_t h = oh * s.stride_h - s.pad_h + kh;
              if (h < 0 || h >= s.H) continue;
              for (int64_t ow = 0; ow < OW; ++ow) {
                const int64_t w = ow * s.stride_w - s.pad_w + kw;
                if (w < 0 || w >= s.W) continue;
                acc += double(dout[((n * s.OC + oc) * OH + oh) * OW + ow]) *
                       inp[((n * s.C + c) * s.H + h) * s.W + w];
              }
            }
          dweight[((oc * s.C + c) * s.KH + kh) * s.KW + kw] += static_cast<float>(acc);
        }
  if (!dbias) return;
#pragma omp parallel for schedule(static)
  for (int64_t oc = 0; oc < s.OC; ++oc) {
    double acc = 0.0;
    for (int64_t n = 0; n < s.N; ++n)
      for (int64_t i = 0; i < OH * OW; ++i) acc += dout[(n * s.OC + oc) * OH * OW + i];
    dbias[oc] += static_cast<float>(acc);
  }
}

}  // namespace meshtrain::cpu
