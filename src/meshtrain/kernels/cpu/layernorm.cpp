// isa-levels: scalar avx2 avx512
#include "meshtrain/kernels/cpu/layernorm.h"
#include "meshtrain/core/isa_dispatch.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace meshtrain::cpu::MT_ISA_NS {

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                       const float* weight, const float* bias, int64_t N, int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const float* x = inp + i * C;
    float* y = out + i * C;
    // The row sums run in SIMD lanes (a fixed order for a given build):
    // summed one by one they were latency-bound scalar adds.
    float s = 0.f;
#pragma omp simd reduction(+ : s)
    for (int64_t c = 0; c < C; ++c) s += x[c];
    const float m = s / C;
    float v = 0.f;
#pragma omp simd reduction(+ : v)
    for (int64_t c = 0; c < C; ++c) {
      float d = x[c] - m;
      v += d * d;
    }
    const float r = 1.0f / std::sqrt(v / C + kLayerNormEps);
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) y[c] = (x[c] - m) * r * weight[c] + bias[c];
    mean[i] = m;
    rstd[i] = r;
  }
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean,
                        const float* rstd, int64_t N, int64_t C) {
  // Rows are split into fixed chunks (independent of the thread count); each
  // chunk sums its dweight/dbias partials, and chunks are added in order.
  const int64_t rows_per_chunk = 64;
  const int64_t nchunks = (N + rows_per_chunk - 1) / rows_per_chunk;
  std::vector<float> partial(static_cast<size_t>(nchunks) * 2 * C, 0.f);
#pragma omp parallel for schedule(static)
  for (int64_t ch = 0; ch < nchunks; ++ch) {
    float* pw = partial.data() + ch * 2 * C;
    float* pb = pw + C;
    const int64_t r1 = std::min(N, (ch + 1) * rows_per_chunk);
    for (int64_t i = ch * rows_per_chunk; i < r1; ++i) {
      const float* x = inp + i * C;
      const float* dy = dout + i * C;
      float* dx = dinp + i * C;
      const float m = mean[i], r = rstd[i];
      float sum_dn = 0.f, sum_dn_n = 0.f;
#pragma omp simd reduction(+ : sum_dn, sum_dn_n)
      for (int64_t c = 0; c < C; ++c) {
        float n = (x[c] - m) * r;
        float dn = dy[c] * weight[c];
        sum_dn += dn;
        sum_dn_n += dn * n;
      }
      const float mean_dn = sum_dn / C, mean_dn_n = sum_dn_n / C;
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) {
        float n = (x[c] - m) * r;
        float dn = dy[c] * weight[c];
        dx[c] += (dn - mean_dn - n * mean_dn_n) * r;
        pw[c] += n * dy[c];
        pb[c] += dy[c];
      }
    }
  }
  for (int64_t ch = 0; ch < nchunks; ++ch) {
    const float* pw = partial.data() + ch * 2 * C;
    for (int64_t c = 0; c < C; ++c) {
      dweight[c] += pw[c];
      dbias[c] += pw[C + c];
    }
  }
}

}  // namespace meshtrain::cpu::MT_ISA_NS

namespace meshtrain::cpu {

#if MT_ISA_BASELINE
// The public entry points: the variant for active_isa() (core/isa_dispatch.h).
MT_ISA_DECLARE(void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias, int64_t N, int64_t C))
MT_ISA_DECLARE(void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp, const float* weight, const float* mean, const float* rstd, int64_t N, int64_t C))
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias, int64_t N, int64_t C) {
  MT_ISA_PICK(layernorm_forward)(out, mean, rstd, inp, weight, bias, N, C);
}
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp, const float* weight, const float* mean, const float* rstd, int64_t N, int64_t C) {
  MT_ISA_PICK(layernorm_backward)(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
}
#endif
}  // namespace meshtrain::cpu
