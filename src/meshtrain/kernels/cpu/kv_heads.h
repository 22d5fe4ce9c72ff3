// Grouped-query attention's shared heads: rows of packed (q, k, v) with NKV
// key/value heads widened to NH heads for the attention kernel (each group of
// NH/NKV query heads reads one key/value head), and the gradient folded back.
#pragma once
#include <cstdint>

namespace meshtrain::cpu {

// qkv rows (N, C + 2 KV) with KV = NKV hd -> full rows (N, 3C), C = NH hd.
void expand_kv_heads(float* full, const float* qkv, int64_t N, int64_t NH, int64_t NKV,
                     int64_t hd);
// dfull rows (N, 3C) -> dqkv rows (N, C + 2 KV), overwritten; a shared head's
// gradient sums its query heads' in head order.
void fold_kv_heads(float* dqkv, const float* dfull, int64_t N, int64_t NH, int64_t NKV,
                   int64_t hd);

}  // namespace meshtrain::cpu
