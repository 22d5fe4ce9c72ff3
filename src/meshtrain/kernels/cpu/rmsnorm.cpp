// isa-levels: scalar avx2 avx512
#include "meshtrain/kernels/cpu/rmsnorm.h"
#include "meshtrain/core/isa_dispatch.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace meshtrain::cpu::MT_ISA_NS {

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int64_t N,
                     int64_t C, float eps) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const float* x = inp + i * C;
    float* y = out + i * C;
    float ss = 0.f;
#pragma omp simd reduction(+ : ss)
    for (int64_t c = 0; c < C; ++c) ss += x[c] * x[c];
    const float r = 1.0f / std::sqrt(ss / C + eps);
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) y[c] = x[c] * r * weight[c];
    rstd[i] = r;
  }
}

void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                      const float* weight, const float* rstd, int64_t N, int64_t C) {
  // Fixed chunks of rows (independent of the thread count), added in order.
  const int64_t rows_per_chunk = 64;
  const int64_t nchunks = (N + rows_per_chunk - 1) / rows_per_chunk;
  std::vector<float> partial(static_cast<size_t>(nchunks) * C, 0.f);
#pragma omp parallel for schedule(static)
  for (int64_t ch = 0; ch < nchunks; ++ch) {
    float* pw = partial.data() + ch * C;
    const int64_t r1 = std::min(N, (ch + 1) * rows_per_chunk);
    for (int64_t i = ch * rows_per_chunk; i < r1; ++i) {
      const float* x = inp + i * C;
      const float* dy = dout + i * C;
      float* dx = dinp + i * C;
      const float r = rstd[i];
      // y = n * w with n = x r; dn = dy w; dx = r (dn - n mean(dn n)).
      float sum_dn_n = 0.f;
#pragma omp simd reduction(+ : sum_dn_n)
      for (int64_t c = 0; c < C; ++c) sum_dn_n += dy[c] * weight[c] * x[c] * r;
      const float mean_dn_n = sum_dn_n / C;
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) {
        const float n = x[c] * r;
        dx[c] += (dy[c] * weight[c] - n * mean_dn_n) * r;
        pw[c] += n * dy[c];
      }
    }
  }
  for (int64_t ch = 0; ch < nchunks; ++ch) {
    const float* pw = partial.data() + ch * C;
    for (int64_t c = 0; c < C; ++c) dweight[c] += pw[c];
  }
}

}  // namespace meshtrain::cpu::MT_ISA_NS

namespace meshtrain::cpu {

#if MT_ISA_BASELINE
MT_ISA_DECLARE(void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int64_t N, int64_t C, float eps))
MT_ISA_DECLARE(void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight, const float* rstd, int64_t N, int64_t C))
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int64_t N, int64_t C, float eps) {
  MT_ISA_PICK(rmsnorm_forward)(out, rstd, inp, weight, N, C, eps);
}
void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight, const float* rstd, int64_t N, int64_t C) {
  MT_ISA_PICK(rmsnorm_backward)(dinp, dweight, dout, inp, weight, rstd, N, C);
}
#endif
}  // namespace meshtrain::cpu
