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
// With sequence parallelism the rows (tokens) between those GEMMs are split
// over the group: f becomes an allgather forward and a reduce-scatter
// backward, g a reduce-scatter forward and an allgather backward.
//
// Overlap: start_allreduce_sum / start_reduce_scatter return at once with the
// collective in flight, so a model can run compute that does not depend on
// it (the weight-gradient GEMM while a column-parallel GEMM's input gradient
// is summed) and wait() before it reads the result.
#pragma once
#include <cstdint>
#include <memory>
#include <stdexcept>

namespace meshtrain {

// A collective started by a start_* call: wait() before reading or writing
// its buffers (and before the next collective's result is needed).
class TensorParallelWork {
 public:
  virtual ~TensorParallelWork() = default;
  virtual void wait() = 0;
};

class TensorParallelGroup {
 public:
  virtual ~TensorParallelGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // In place, blocking; every rank of the group calls them in the same order.
  virtual void allreduce_sum(float* data, int64_t count) = 0;
  virtual void allreduce_max(float* data, int64_t count) = 0;
  // Sums of doubles (batch norm's per-channel statistics, which f32 would
  // cancel): the default throws; CommTensorParallelGroup has it.
  virtual void allreduce_sum_f64(double* data, int64_t count);
  // Equal blocks of `count` floats per rank, in rank order: all = [rank 0's
  // block, rank 1's, ...]; reduce_scatter sums `all` over the group and
  // leaves this rank's block in `mine`.
  virtual void allgather(const float* mine, float* all, int64_t count) = 0;
  // The same for 16-bit values (mixed precision's stored GEMM inputs).
  virtual void allgather_half(const uint16_t* mine, uint16_t* all, int64_t count) = 0;
  virtual void reduce_scatter(const float* all, float* mine, int64_t count) = 0;
  // Asynchronous forms (same order rule: every rank starts them in the same
  // order). The default runs the blocking call and returns finished work.
  virtual std::unique_ptr<TensorParallelWork> start_allreduce_sum(float* data, int64_t count);
  virtual std::unique_ptr<TensorParallelWork> start_reduce_scatter(const float* all, float* mine,
                                                                   int64_t count);
};

// An input gradient being summed over the tp group: where the sum will be,
// and the collective to wait for. get() waits (once) and returns the data.
class PendingGradient {
 public:
  PendingGradient(const float* data, std::unique_ptr<TensorParallelWork> work)
      : data_(data), work_(std::move(work)) {}
  const float* get() {
    if (work_) work_->wait(), work_.reset();
    return data_;
  }

 private:
  const float* data_;
  std::unique_ptr<TensorParallelWork> work_;
};

namespace detail {
struct DoneWork final : TensorParallelWork {
  void wait() override {}
};
}  // namespace detail

inline std::unique_ptr<TensorParallelWork> TensorParallelGroup::start_allreduce_sum(float* data,
                                                                                  int64_t count) {
  allreduce_sum(data, count);
  return std::make_unique<detail::DoneWork>();
}

inline void TensorParallelGroup::allreduce_sum_f64(double*, int64_t) {
  throw std::runtime_error("this collective group has no allreduce of doubles");
}

inline std::unique_ptr<TensorParallelWork> TensorParallelGroup::start_reduce_scatter(
    const float* all, float* mine, int64_t count) {
  reduce_scatter(all, mine, count);
  return std::make_unique<detail::DoneWork>();
}

}  // namespace meshtrain
