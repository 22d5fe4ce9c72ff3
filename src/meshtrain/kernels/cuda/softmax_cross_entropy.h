// Fused softmax + cross-entropy over padded logits (N, Vp) on the GPU
// (semantics of kernels/cpu/softmax_cross_entropy.h).
#pragma once
#include <cstdint>

#include "meshtrain/core/stream.h"

namespace meshtrain::cuda {

// Returns the number of rows with a target >= 0; waits for the stream.
int64_t softmax_cross_entropy_forward(Stream s, float* losses, const float* logits,
                                      const int32_t* targets, int64_t N, int64_t V, int64_t Vp);
void softmax_cross_entropy_backward(Stream s, float* logits, const int32_t* targets, float dloss,
                                    int64_t N, int64_t V, int64_t Vp);

}  // namespace meshtrain::cuda
