#include "meshtrain/parallel/local_sgd.h"

#include <cstring>

#include <fmt/format.h>

#include "meshtrain/comm/wire_bytes.h"
#include "meshtrain/core/error.h"
#include "meshtrain/nn/model.h"
#include "meshtrain/parallel/completion_clock.h"

namespace meshtrain::parallel {

LocalSgd::LocalSgd(comm::Communicator comm, LocalSgdOptions opts) : comm_(std::move(comm)), opts_(opts) {
  MT_CHECK(comm_.valid(), "local SGD needs a valid communicator");
  MT_CHECK(opts_.sync_every >= 1, "parallel.local_sgd.sync_every must be >= 1, got {}", opts_.sync_every);
  MT_CHECK(opts_.outer_lr > 0, "parallel.local_sgd.outer_lr must be > 0, got {}", opts_.outer_lr);
  MT_CHECK(opts_.outer_momentum >= 0 && opts_.outer_momentum < 1,
           "parallel.local_sgd.outer_momentum must be in [0, 1), got {}", opts_.outer_momentum);
}

std::string LocalSgd::describe() const {
  std::string outer = opts_.outer_momentum > 0
                          ? fmt::format("outer SGD lr {} with {}momentum {}", opts_.outer_lr,
                                        opts_.nesterov ? "Nesterov " : "", opts_.outer_momentum)
                          : fmt::format("outer lr {}", opts_.outer_lr);
  return fmt::format("local SGD: {} ranks over {}, each steps on its own gradients; the moves "
                     "averaged every {} step(s) ({})", comm_.size(), comm_.transport(), opts_.sync_every, outer);
}

void LocalSgd::attach(Model& model) {
  model_ = &model;
  MT_CHECK(model.param_buffer().device().is_cpu(), "local SGD keeps its anchor in host memory: train on the CPU");
  const int64_t n = model.layout().numel;
  anchor_ = Tensor::zeros({n}, DType::F32, MemCategory::OptimizerState);
  if (opts_.outer_momentum > 0) momentum_ = Tensor::zeros({n}, DType::F32, MemCategory::OptimizerState);
}

void LocalSgd::zero_grad() {
  MT_CHECK(model_, "attach() a model before zero_grad()");
  model_->zero_grad();
  timing_ = {};  // a step that averages says so in after_update()
  timing_.wire_bytes = 0;
  timing_.dense_bytes = dense_bytes();
}

float* LocalSgd::gradients() {
  MT_CHECK(model_, "attach() a model first");
  return model_->grad_buffer().data<float>();
}

ElemSpan LocalSgd::update_range() const { return {0, model_ ? model_->layout().numel : 0}; }

void LocalSgd::after_resume() {
  MT_CHECK(model_, "attach() a model before after_resume()");
  comm_.broadcast(model_->param_buffer(), /*root=*/0).wait();
  std::memcpy(anchor_.data<float>(), model_->param_buffer().data<float>(), anchor_.nbytes());
  // The outer momentum and the step count are the checkpoint's (zero when
  // starting fresh or resuming a checkpoint without them).
}

void LocalSgd::after_update() {
  if (++local_steps_ < opts_.sync_every) return;  // nothing sent this step
  average();
}

double LocalSgd::dense_bytes() const {
  return comm::bytes_sent_per_rank(comm::CollOp::Allreduce, anchor_.nbytes(), comm_.size());
}

void LocalSgd::average() {
  const double t0 = steady_now_s();
  const int64_t n = anchor_.numel();
  float* p = model_->param_buffer().data<float>();
  float* a = anchor_.data<float>();
  // The gradient buffer is free after the update: it carries the deltas.
  float* d = model_->grad_buffer().data<float>();
  for (int64_t i = 0; i < n; ++i) d[i] = a[i] - p[i];
  comm_.allreduce(d, static_cast<size_t>(n), DType::F32, comm::ReduceOp::Avg).wait();
  const float lr = opts_.outer_lr, mu = opts_.outer_momentum;
  float* v = momentum_.numel() > 0 ? momentum_.data<float>() : nullptr;
  for (int64_t i = 0; i < n; ++i) {
    float step = d[i];
    if (v) {
      v[i] = mu * v[i] + d[i];
      step = opts_.nesterov ? d[i] + mu * v[i] : v[i];
    }
    a[i] -= lr * step;
    p[i] = a[i];
  }
  local_steps_ = 0;
  timing_ = {};
  timing_.buckets = 1;
  timing_.exposed_s = timing_.total_s = steady_now_s() - t0;
  timing_.wire_bytes = timing_.dense_bytes = dense_bytes();  // one parameter-sized allreduce
}

void LocalSgd::gather_full_parameters() {
  if (local_steps_ > 0) average();
}

void LocalSgd::verify_replicas() {
  if (local_steps_ != 0) return;  // they differ by design between averages
  check_replicas_equal(comm_, model_->param_buffer(), "local SGD, right after an average");
}

SyncState LocalSgd::checkpoint_state() {
  SyncState s;
  if (momentum_.numel() > 0) s.tensors.push_back({"sync.outer_momentum", &momentum_, false});
  s.counters = {{"local_steps", local_steps_}};
  return s;
}

void LocalSgd::restore_counters(const nlohmann::json& j) {
  if (j.is_object()) local_steps_ = j.value("local_steps", local_steps_);
}

}  // namespace meshtrain::parallel
