#include "meshtrain/nn/vocab_parallel_loss.h"


namespace meshtrain {

int64_t vocab_parallel_cross_entropy_forward(const KernelTable& k, Stream st, float* losses,
                                             float* lse, float* scratch, const float* logits,
                                             const int32_t* targets, int64_t N,
                                             const VocabShard& s, TensorParallelGroup& group) {
  const int64_t real = s.real();
  // 1. Row max over the whole vocabulary (a shard of padding only offers -inf).
  k.vocab_shard_row_max(st, lse, logits, N, real, s.Vl);
  group.allreduce_max(lse, N);
  // 2. Sum of exp(x - max) and the target's logit (held by one shard), together.
  k.vocab_shard_sum_exp(st, scratch, logits, lse, targets, N, real, s.Vl, s.v_begin);
  group.allreduce_sum(scratch, 2 * N);
  return k.vocab_shard_losses(st, losses, lse, scratch, targets, N);
}

void vocab_parallel_cross_entropy_backward(const KernelTable& k, Stream st, float* logits,
                                           const float* lse, const int32_t* targets, float dloss,
                                           int64_t N, const VocabShard& s) {
  k.vocab_shard_backward(st, logits, lse, targets, dloss, N, s.real(), s.Vl, s.v_begin);
}

}  // namespace meshtrain
