// Grouped-query attention's shared key/value heads widened and folded on the
// GPU (semantics of kernels/cpu/kv_heads.h).
#pragma once
#include <cstdint>

#include "meshtrain/core/stream.h"

namespace meshtrain::cuda {

void expand_kv_heads(Stream s, float* full, const float* qkv, int64_t N, int64_t NH, int64_t NKV,
                     int64_t hd);
void fold_kv_heads(Stream s, float* dqkv, const float* dfull, int64_t N, int64_t NH, int64_t NKV,
                   int64_t hd);

}  // namespace meshtrain::cuda
