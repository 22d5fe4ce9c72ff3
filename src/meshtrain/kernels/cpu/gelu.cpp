// isa-levels: scalar avx2 avx512
#include "meshtrain/kernels/cpu/gelu.h"
#include "meshtrain/core/isa_dispatch.h"

#include "meshtrain/kernels/cpu/vec_math.h"

#if defined(__AVX2__) && defined(__FMA__) && !defined(__AVX512F__)
#include <immintrin.h>

#include "meshtrain/kernels/cpu/vec_math_avx2.h"
#endif

// GELU(x) = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3), written
// with e = exp(2u) and s = 1 / (e + 1) (so 0.5 (1 + tanh u) = 1 - s):
//   GELU(x)  = x (1 - s)
//   GELU'(x) = (1 - s) (1 + x s 2u'),  2u' = 2 sqrt(2/pi) (1 + 3 * 0.044715 x^2)
// One exp and one division per element. 2u is clamped to [-80, 80]: inside
// exp's range with s a normal float (no subnormal arithmetic), and wide
// enough that GELU' = 1 + x s 2u' stays 1 to rounding up to |x| ~ 1e9 (a
// clamp at tanh's own saturation, |u| = 9, left s at 1.5e-8 and GELU'(100)
// 0.3% high). Below -80 s = 1 exactly, so GELU = 0; x (1 - s), not x - x s,
// keeps GELU(inf) = inf. NaN stays NaN.
namespace meshtrain::cpu::MT_ISA_NS {

namespace {
constexpr float kTwoK = 2.0f * 0.7978845608028654f;   // 2 sqrt(2/pi)
constexpr float kTwoKC = kTwoK * 0.044715f;            // 2 sqrt(2/pi) * 0.044715
constexpr float kTwoKC3 = 3.0f * kTwoKC;
constexpr float kClamp = 80.0f;
constexpr int64_t kGrain = 4096;

// 1 / (exp(2u) + 1) for the generic loops.
[[gnu::always_inline]] inline float gelu_s(float x) {
  float u2 = x * (kTwoK + kTwoKC * x * x);
  u2 = u2 < -kClamp ? -kClamp : (u2 > kClamp ? kClamp : u2);
  return 1.0f / (expf_in_range(u2) + 1.0f);
}

#if defined(__AVX2__) && defined(__FMA__) && !defined(__AVX512F__)
// The AVX2 loops by hand: written as C++ the clamp vectorizes into compares
// and blends (a third of the loop), where max/min do it in two instructions.
// Operand order keeps NaN: max(c, v) and min(c, v) return v when v is NaN.
inline __m256 gelu_s8(__m256 x) {
  const __m256 x2 = _mm256_mul_ps(x, x);
  __m256 u2 = _mm256_mul_ps(x, _mm256_fmadd_ps(_mm256_set1_ps(kTwoKC), x2, _mm256_set1_ps(kTwoK)));
  u2 = _mm256_min_ps(_mm256_set1_ps(kClamp), _mm256_max_ps(_mm256_set1_ps(-kClamp), u2));
  return _mm256_div_ps(_mm256_set1_ps(1.0f),
                       _mm256_add_ps(exp8_in_range(u2), _mm256_set1_ps(1.0f)));
}

int64_t gelu_forward_vec(float* out, const float* inp, int64_t b, int64_t e) {
  int64_t i = b;
  for (; i + 8 <= e; i += 8) {
    const __m256 x = _mm256_loadu_ps(inp + i);
    _mm256_storeu_ps(out + i, _mm256_mul_ps(x, _mm256_sub_ps(_mm256_set1_ps(1.0f), gelu_s8(x))));
  }
  return i;
}

int64_t gelu_backward_vec(float* dinp, const float* inp, const float* dout, int64_t b, int64_t e) {
  int64_t i = b;
  const __m256 one = _mm256_set1_ps(1.0f);
  for (; i + 8 <= e; i += 8) {
    const __m256 x = _mm256_loadu_ps(inp + i);
    const __m256 s = gelu_s8(x);
    const __m256 du2 =
        _mm256_fmadd_ps(_mm256_set1_ps(kTwoKC3), _mm256_mul_ps(x, x), _mm256_set1_ps(kTwoK));
    const __m256 g = _mm256_mul_ps(_mm256_sub_ps(one, s),
                                   _mm256_fmadd_ps(_mm256_mul_ps(x, s), du2, one));
    _mm256_storeu_ps(dinp + i, _mm256_mul_ps(_mm256_loadu_ps(dout + i), g));
  }
  return i;
}
#else
int64_t gelu_forward_vec(float*, const float*, int64_t b, int64_t) { return b; }
int64_t gelu_backward_vec(float*, const float*, const float*, int64_t b, int64_t) { return b; }
#endif
}  // namespace

void gelu_forward(float* out, const float* inp, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < n; b += kGrain) {
    const int64_t e = b + kGrain < n ? b + kGrain : n;
#pragma omp simd
    for (int64_t i = gelu_forward_vec(out, inp, b, e); i < e; ++i) {
      const float x = inp[i];
      out[i] = x * (1.0f - gelu_s(x));
    }
  }
}

void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < n; b += kGrain) {
    const int64_t e = b + kGrain < n ? b + kGrain : n;
#pragma omp simd
    for (int64_t i = gelu_backward_vec(dinp, inp, dout, b, e); i < e; ++i) {
      const float x = inp[i];
      const float s = gelu_s(x);
      const float du2 = kTwoK + kTwoKC3 * x * x;
      dinp[i] = dout[i] * ((1.0f - s) * (1.0f + x * s * du2));
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
