#include "meshtrain/parallel/tp_group.h"

#include <chrono>

#include "meshtrain/telemetry/trace_writer.h"

namespace meshtrain::parallel {

namespace {

// Times `op` into `total` and traces it as a comm span.
template <class Op>
void timed(double& total, const char* name, Op op) {
  telemetry::TraceScope trace(telemetry::global_tracer(), name, "comm");
  const auto t0 = std::chrono::steady_clock::now();
  op();
  total += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

void CommTensorParallelGroup::allreduce_sum(float* data, int64_t count) {
  timed(seconds_, "tp allreduce", [&] {
    comm_.allreduce(data, static_cast<size_t>(count), DType::F32, comm::ReduceOp::Sum).wait();
  });
}

void CommTensorParallelGroup::allreduce_max(float* data, int64_t count) {
  timed(seconds_, "tp allreduce max", [&] {
    comm_.allreduce(data, static_cast<size_t>(count), DType::F32, comm::ReduceOp::Max).wait();
  });
}

void CommTensorParallelGroup::allgather(const float* mine, float* all, int64_t count) {
  // The communicator takes the total count (equal blocks here).
  timed(seconds_, "tp allgather", [&] {
    comm_.allgather(mine, all, static_cast<size_t>(count) * comm_.size(), DType::F32).wait();
  });
}

void CommTensorParallelGroup::allgather_half(const uint16_t* mine, uint16_t* all, int64_t count) {
  // Moved, not reduced: the 16-bit format does not matter.
  timed(seconds_, "tp allgather", [&] {
    comm_.allgather(mine, all, static_cast<size_t>(count) * comm_.size(), DType::BF16).wait();
  });
}

void CommTensorParallelGroup::reduce_scatter(const float* all, float* mine, int64_t count) {
  timed(seconds_, "tp reduce-scatter", [&] {
    comm_.reduce_scatter(all, mine, static_cast<size_t>(count) * comm_.size(), DType::F32,
                         comm::ReduceOp::Sum).wait();
  });
}

std::shared_ptr<CommTensorParallelGroup> make_tp_group(comm::Communicator comm) {
  return std::make_shared<CommTensorParallelGroup>(std::move(comm));
}

}  // namespace meshtrain::parallel
