#include "meshtrain/kernels/cpu/topk.h"

#include <cmath>

#include "meshtrain/core/error.h"

namespace meshtrain::cpu {

int64_t topk_correct(const float* logits, const int32_t* targets, int64_t N, int64_t V,
                     int64_t Vp, int64_t k) {
  for (int64_t i = 0; i < N; ++i)
    MT_CHECK(targets[i] < V, "topk_correct: row {} has label {}, outside the {} classes", i,
             targets[i], V);
  int64_t correct = 0;
#pragma omp parallel for reduction(+ : correct) schedule(static) if (N * V > 65536)
  for (int64_t i = 0; i < N; ++i) {
    const int32_t t = targets[i];
    if (t < 0) continue;
    const float* z = logits + i * Vp;
    const float zt = z[t];
    if (std::isnan(zt)) continue;
    int64_t above = 0;
    for (int64_t v = 0; v < V; ++v) above += z[v] > zt;
    correct += above < k;
  }
  return correct;
}

}  // namespace meshtrain::cpu
