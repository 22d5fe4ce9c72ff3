// Softmax cross-entropy over logits split by vocabulary across a tensor-
// parallel group, without ever gathering a full row: this shard holds
// columns [v_begin, v_begin + Vl) of every row (row stride Vl), and columns
// at or beyond V (the real vocabulary) are padding. Per row the max is
// reduced (max), then the sum of exponentials and the target's logit (sum)
// in one allreduce of 2N floats. Targets < 0 are ignored.
#pragma once
#include <cstdint>

#include "meshtrain/kernels/kernel_table.h"
#include "meshtrain/nn/tensor_parallel.h"

namespace meshtrain {

struct VocabShard {
  int64_t v_begin = 0, Vl = 0, V = 0;  // first column, columns held, real vocabulary
  // Real (non-padding) columns this shard holds.
  int64_t real() const { return V <= v_begin ? 0 : (V - v_begin < Vl ? V - v_begin : Vl); }
};

// Fills losses (N; 0 for ignored targets) and lse (N: log-sum-exp of each
// full row, for backward); `scratch` holds 2N floats. Returns the number of
// targets not ignored. Collective over `group`.
int64_t vocab_parallel_cross_entropy_forward(const KernelTable& k, Stream stream, float* losses,
                                             float* lse, float* scratch, const float* logits,
                                             const int32_t* targets, int64_t N,
                                             const VocabShard& shard, TensorParallelGroup& group);

// logits -> d(dloss * loss)/d(logits) in place, from the forward's lse
// (no communication).
void vocab_parallel_cross_entropy_backward(const KernelTable& k, Stream stream, float* logits,
                                           const float* lse, const int32_t* targets, float dloss,
                                           int64_t N, const VocabShard& shard);

}  // namespace meshtrain
