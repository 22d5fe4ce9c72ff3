#include "meshtrain/parallel/tp_group.h"

namespace meshtrain::parallel {

void CommTensorParallelGroup::allreduce_sum(float* data, int64_t count) {
  comm_.allreduce(data, static_cast<size_t>(count), DType::F32, comm::ReduceOp::Sum).wait();
}

void CommTensorParallelGroup::allreduce_max(float* data, int64_t count) {
  comm_.allreduce(data, static_cast<size_t>(count), DType::F32, comm::ReduceOp::Max).wait();
}

void CommTensorParallelGroup::allgather(const float* mine, float* all, int64_t count) {
  // The communicator takes the total count (equal blocks here).
  comm_.allgather(mine, all, static_cast<size_t>(count) * comm_.size(), DType::F32).wait();
}

void CommTensorParallelGroup::reduce_scatter(const float* all, float* mine, int64_t count) {
  comm_.reduce_scatter(all, mine, static_cast<size_t>(count) * comm_.size(), DType::F32,
                       comm::ReduceOp::Sum).wait();
}

std::shared_ptr<TensorParallelGroup> make_tp_group(comm::Communicator comm) {
  return std::make_shared<CommTensorParallelGroup>(std::move(comm));
}

}  // namespace meshtrain::parallel
