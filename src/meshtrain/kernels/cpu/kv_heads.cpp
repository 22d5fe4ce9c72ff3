#include "meshtrain/kernels/cpu/kv_heads.h"

#include <cstring>

namespace meshtrain::cpu {

void expand_kv_heads(float* full, const float* qkv, int64_t N, int64_t NH, int64_t NKV,
                     int64_t hd) {
  const int64_t C = NH * hd, KV = NKV * hd, Q = C + 2 * KV, rep = NH / NKV;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const float* src = qkv + i * Q;
    float* dst = full + i * 3 * C;
    std::memcpy(dst, src, sizeof(float) * C);
    for (int64_t h = 0; h < NH; ++h) {
      const int64_t kvh = h / rep;
      std::memcpy(dst + C + h * hd, src + C + kvh * hd, sizeof(float) * hd);
      std::memcpy(dst + 2 * C + h * hd, src + C + KV + kvh * hd, sizeof(float) * hd);
    }
  }
}

void fold_kv_heads(float* dqkv, const float* dfull, int64_t N, int64_t NH, int64_t NKV,
                   int64_t hd) {
  const int64_t C = NH * hd, KV = NKV * hd, Q = C + 2 * KV, rep = NH / NKV;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const float* src = dfull + i * 3 * C;
    float* dst = dqkv + i * Q;
    std::memcpy(dst, src, sizeof(float) * C);
    std::memset(dst + C, 0, sizeof(float) * 2 * KV);
    for (int64_t h = 0; h < NH; ++h) {  // query heads in group order: a fixed sum order
      const int64_t kvh = h / rep;
      float* dk = dst + C + kvh * hd;
      float* dv = dst + C + KV + kvh * hd;
      const float* sk = src + C + h * hd;
      const float* sv = src + 2 * C + h * hd;
      for (int64_t d = 0; d < hd; ++d) dk[d] += sk[d], dv[d] += sv[d];
    }
  }
}

}  // namespace meshtrain::cpu
