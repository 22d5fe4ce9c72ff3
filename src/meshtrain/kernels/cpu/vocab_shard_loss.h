// The per-shard pieces of softmax cross-entropy over logits split by
// vocabulary (nn/vocab_parallel_loss.h runs them between its collectives):
// rows of `stride` columns of which the first `real` are real vocabulary
// entries [v_begin, v_begin + real); targets < 0 are ignored.
#pragma once
#include <cstdint>

namespace meshtrain::cpu {

// maxes[i] = max of row i's real columns (-inf for a shard of padding only).
void vocab_shard_row_max(float* maxes, const float* logits, int64_t N, int64_t real,
                         int64_t stride);
// scratch[2i] = sum_j exp(x_ij - maxes[i]); scratch[2i+1] = the target's
// logit when this shard holds it, else 0.
void vocab_shard_sum_exp(float* scratch, const float* logits, const float* maxes,
                         const int32_t* targets, int64_t N, int64_t real, int64_t stride,
                         int64_t v_begin);
// From the reduced maxes (in lse) and scratch: lse[i] += log(scratch[2i]),
// losses[i] = lse[i] - target logit (0 when ignored). Returns the counted rows.
int64_t vocab_shard_losses(float* losses, float* lse, const float* scratch,
                           const int32_t* targets, int64_t N);
// logits -> dloss (softmax - onehot) in place; padding columns and ignored rows 0.
void vocab_shard_backward(float* logits, const float* lse, const int32_t* targets, float dloss,
                          int64_t N, int64_t real, int64_t stride, int64_t v_begin);

}  // namespace meshtrain::cpu
