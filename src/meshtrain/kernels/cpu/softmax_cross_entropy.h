// Fused softmax + cross-entropy over the logits of a language model head.
#pragma once
#include <cstdint>

namespace meshtrain::cpu {

// logits (N, Vp), only the first V columns are real (padded columns get
// probability 0). losses[i] = -log softmax(logits[i])[targets[i]], or 0 when
// targets[i] < 0 (ignored position). Returns the number of counted positions.
int64_t softmax_cross_entropy_forward(float* losses, const float* logits, const int32_t* targets,
                                      int64_t N, int64_t V, int64_t Vp);

// Overwrites logits with d(sum_i dloss * losses[i])/dlogits = dloss*(p - onehot)
// for counted rows, 0 for ignored rows and padded columns.
void softmax_cross_entropy_backward(float* logits, const int32_t* targets, float dloss, int64_t N,
                                    int64_t V, int64_t Vp);

}  // namespace meshtrain::cpu
