#include "meshtrain/parallel/tp_group.h"

#include <chrono>
#include <cstdlib>
#include <string>

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

void CommTensorParallelGroup::allreduce_sum_f64(double* data, int64_t count) {
  timed(seconds_, "allreduce f64", [&] {
    comm_.allreduce(data, static_cast<size_t>(count), DType::F64, comm::ReduceOp::Sum).wait();
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

namespace {

// A collective in flight on the communicator's engine.
class CommWork final : public TensorParallelWork {
 public:
  CommWork(comm::Work work, double& total, const char* name)
      : work_(std::move(work)), total_(total), name_(name) {}
  ~CommWork() override {
    // Never leave a collective behind on its buffers (an error surfaced at wait() already).
    if (!waited_) try {
        work_.wait();
      } catch (...) {
      }
  }
  void wait() override {
    if (waited_) return;
    waited_ = true;
    timed(total_, name_, [&] { work_.wait(); });
  }

 private:
  comm::Work work_;
  double& total_;
  const char* name_;
  bool waited_ = false;
};

}  // namespace

std::unique_ptr<TensorParallelWork> CommTensorParallelGroup::start_allreduce_sum(float* data,
                                                                                int64_t count) {
  if (!overlap_) return TensorParallelGroup::start_allreduce_sum(data, count);
  return std::make_unique<CommWork>(
      comm_.allreduce(data, static_cast<size_t>(count), DType::F32, comm::ReduceOp::Sum), seconds_,
      "tp allreduce wait");
}

std::unique_ptr<TensorParallelWork> CommTensorParallelGroup::start_reduce_scatter(const float* all,
                                                                                 float* mine,
                                                                                 int64_t count) {
  if (!overlap_) return TensorParallelGroup::start_reduce_scatter(all, mine, count);
  return std::make_unique<CommWork>(
      comm_.reduce_scatter(all, mine, static_cast<size_t>(count) * comm_.size(), DType::F32,
                           comm::ReduceOp::Sum),
      seconds_, "tp reduce-scatter wait");
}

std::shared_ptr<CommTensorParallelGroup> make_tp_group(comm::Communicator comm) {
  const char* env = std::getenv("MESHTRAIN_TP_OVERLAP");
  const bool overlap = !(env && std::string(env) == "0");
  return std::make_shared<CommTensorParallelGroup>(std::move(comm), overlap);
}

}  // namespace meshtrain::parallel
