// The tensor-parallel group a model shard calls (nn/tensor_parallel.h), over
// the mesh's tp communicator: blocking collectives issued from the compute
// thread, in the order the model's forward and backward issue them. Each is
// a "comm" span in the trace ("tp allreduce", ...) and its time is summed
// (seconds()): the step's exposed tensor-parallel communication. The start_*
// forms run on the communicator's engine while the model computes; only
// their wait is counted.
#pragma once
#include <memory>

#include "meshtrain/comm/communicator.h"
#include "meshtrain/nn/tensor_parallel.h"

namespace meshtrain::parallel {

class CommTensorParallelGroup final : public TensorParallelGroup {
 public:
  // overlap = false: the start_* forms block (A/B runs, debugging).
  explicit CommTensorParallelGroup(comm::Communicator comm, bool overlap = true)
      : comm_(std::move(comm)), overlap_(overlap) {}
  int rank() const override { return comm_.rank(); }
  int size() const override { return comm_.size(); }
  void allreduce_sum(float* data, int64_t count) override;
  void allreduce_max(float* data, int64_t count) override;
  void allreduce_sum_f64(double* data, int64_t count) override;
  void allgather(const float* mine, float* all, int64_t count) override;
  void allgather_half(const uint16_t* mine, uint16_t* all, int64_t count) override;
  void reduce_scatter(const float* all, float* mine, int64_t count) override;
  // In flight on the communicator's engine; the time counted (seconds()) and
  // traced ("tp ... wait") is what wait() blocks: the exposed part.
  std::unique_ptr<TensorParallelWork> start_allreduce_sum(float* data, int64_t count) override;
  std::unique_ptr<TensorParallelWork> start_reduce_scatter(const float* all, float* mine,
                                                           int64_t count) override;
  const comm::Communicator& communicator() const { return comm_; }
  // Seconds spent in this group's collectives so far.
  double seconds() const { return seconds_; }

 private:
  comm::Communicator comm_;
  bool overlap_ = true;
  double seconds_ = 0;
};

// Overlap on unless the environment sets MESHTRAIN_TP_OVERLAP=0.
std::shared_ptr<CommTensorParallelGroup> make_tp_group(comm::Communicator comm);

}  // namespace meshtrain::parallel
