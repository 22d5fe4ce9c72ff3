#include "meshtrain/nn/decoder.h"

#include <algorithm>
#include <cmath>

namespace meshtrain {

void cached_attention(float* out, const float* q, const float* keys, const float* values,
                      int64_t stride, int64_t len, int64_t hd, float* scores) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  float mx = -INFINITY;
  for (int64_t t = 0; t < len; ++t) {
    const float* k = keys + t * stride;
    float dot = 0;
    for (int64_t d = 0; d < hd; ++d) dot += q[d] * k[d];
    scores[t] = dot * scale;
    mx = std::max(mx, scores[t]);
  }
  float sum = 0;
  for (int64_t t = 0; t < len; ++t) sum += (scores[t] = std::exp(scores[t] - mx));
  const float inv = 1.0f / sum;
  std::fill(out, out + hd, 0.0f);
  for (int64_t t = 0; t < len; ++t) {
    const float p = scores[t] * inv;
    const float* v = values + t * stride;
    for (int64_t d = 0; d < hd; ++d) out[d] += p * v[d];
  }
}

}  // namespace meshtrain
