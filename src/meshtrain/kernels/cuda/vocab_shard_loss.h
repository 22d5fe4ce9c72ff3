// The per-shard pieces of vocabulary-parallel cross-entropy on the GPU
// (semantics of kernels/cpu/vocab_shard_loss.h).
#pragma once
#include <cstdint>

#include "meshtrain/core/stream.h"

namespace meshtrain::cuda {

void vocab_shard_row_max(Stream s, float* maxes, const float* logits, int64_t N, int64_t real,
                         int64_t stride);
void vocab_shard_sum_exp(Stream s, float* scratch, const float* logits, const float* maxes,
                         const int32_t* targets, int64_t N, int64_t real, int64_t stride,
                         int64_t v_begin);
// Waits for the stream (returns the counted rows).
int64_t vocab_shard_losses(Stream s, float* losses, float* lse, const float* scratch,
                           const int32_t* targets, int64_t N);
void vocab_shard_backward(Stream s, float* logits, const float* lse, const int32_t* targets,
                          float dloss, int64_t N, int64_t real, int64_t stride, int64_t v_begin);

}  // namespace meshtrain::cuda
