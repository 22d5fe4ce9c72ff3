// The collectives a tensor-parallel shard of a model calls inside its own
// forward and backward, over the ranks that hold the other shards of the
// same layers (its tp group). nn/ sees only this interface; parallel/
// implements it over a Communicator (parallel/tp_group.h), so models stay
// free of transports and a CUDA backend can implement it over NCCL.
//
// Megatron's two conjugate operators are these calls at fixed places:
//   f: identity forward, allreduce of the input gradient backward (before a
//      column-parallel GEMM: QKV, MLP-up, the vocabulary-parallel head);
//   g: allreduce forward, identity backward (after a row-parallel GEMM:
//      attention-out, MLP-down, the vocabulary-parallel embedding lookup).
#pragma once
#include <cstdint>
#include <memory>

namespace meshtrain {

class TensorParallelGroup {
 public:
  virtual ~TensorParallelGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // In place, blocking; every rank of the group calls them in the same order.
  virtual void allreduce_sum(float* data, int64_t count) = 0;
  virtual void allreduce_max(float* data, int64_t count) = 0;
};

}  // namespace meshtrain
