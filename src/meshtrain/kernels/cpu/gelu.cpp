// isa-levels: scalar avx2 avx512
#include "meshtrain/kernels/cpu/gelu.h"
#include "meshtrain/core/isa_dispatch.h"

#include "meshtrain/kernels/cpu/vec_math.h"

namespace meshtrain::cpu::MT_ISA_NS {

namespace {
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;
constexpr int64_t kGrain = 4096;
}  // namespace

void gelu_forward(float* out, const float* inp, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < n; b += kGrain) {
    const int64_t e = b + kGrain < n ? b + kGrain : n;
#pragma omp simd
    for (int64_t i = b; i < e; ++i) {
      float x = inp[i];
      float u = kSqrt2OverPi * (x + kCubic * x * x * x);
      out[i] = 0.5f * x * (1.0f + fast_tanhf(u));
    }
  }
}

void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < n; b += kGrain) {
    const int64_t e = b + kGrain < n ? b + kGrain : n;
#pragma omp simd
    for (int64_t i = b; i < e; ++i) {
      float x = inp[i];
      float u = kSqrt2OverPi * (x + kCubic * x * x * x);
      float t = fast_tanhf(u);
      float du = kSqrt2OverPi * (1.0f + 3.0f * kCubic * x * x);
      float g = 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
      dinp[i] = dout[i] * g;
    }
  }
}

}  // namespace meshtrain::cpu::MT_ISA_NS

namespace meshtrain::cpu {

#if MT_ISA_BASELINE
// The public entry points: the variant for active_isa() (core/isa_dispatch.h).
MT_ISA_DECLARE(void gelu_forward(float* out, const float* inp, int64_t n))
MT_ISA_DECLARE(void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n))
void gelu_forward(float* out, const float* inp, int64_t n) {
  MT_ISA_PICK(gelu_forward)(out, inp, n);
}
void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) {
  MT_ISA_PICK(gelu_backward)(dinp, inp, dout, n);
}
#endif
}  // namespace meshtrain::cpu
