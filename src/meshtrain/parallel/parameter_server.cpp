#include "meshtrain/parallel/parameter_server.h"

#include <cstring>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "meshtrain/core/error.h"
#include "meshtrain/core/storage.h"
#include "meshtrain/nn/model.h"

namespace meshtrain::parallel {

ParameterServer::ParameterServer(comm::Communicator comm, ParameterServerOptions opts,
                                 OptimizerConfig optimizer)
    : comm_(std::move(comm)), opts_(opts), optimizer_cfg_(std::move(optimizer)) {
  MT_CHECK(comm_.valid(), "a parameter server needs a valid communicator");
  MT_CHECK(opts_.staleness >= 0, "parallel.parameter_server.staleness must be >= 0, got {}",
           opts_.staleness);
  MT_CHECK(!optimizer_cfg_.offload.enabled(), "parallel.parameter_server with offload.optimizer_state = "
           "\"{}\": the shards keep the optimizer state in shared memory; set it to \"none\"",
           optimizer_cfg_.offload.optimizer_state);
}

ParameterServer::~ParameterServer() = default;

std::string ParameterServer::describe() const {
  std::string sizes;
  for (int k = 0; store_ && k < store_->shards(); ++k)
    sizes += fmt::format("{}{}", k ? "/" : "", store_->shard(k).count());
  return fmt::format("parameter server: {} workers, one shard each in shared memory ({} parameters), "
                     "{}", comm_.size(), sizes,
                     opts_.staleness == 0
                         ? "staleness 0: every update waits for every worker (synchronous)"
                         : fmt::format("a gradient lands at most {} update(s) after its parameters "
                                       "were read{}; no barrier between steps", opts_.staleness,
                                       opts_.staleness_lr ? ", lr divided by its staleness above 1" : ""));
}

void ParameterServer::attach(Model& model) {
  model_ = &model;
  MT_CHECK(model.param_buffer().device().is_cpu(), "the parameter server keeps its shards in host "
           "shared memory: train on the CPU");
  const ParamLayout& layout = model.layout();
  std::vector<int64_t> starts;
  for (const ParamInfo& p : layout.params) starts.push_back(p.begin);
  const std::vector<ElemSpan> spans = shard_spans(layout.numel, starts, comm_.size());
  const int states = optimizer_cfg_.states_per_param();
  store_ = std::make_unique<ParameterStore>(comm_, spans, states, opts_.staleness, opts_.staleness_lr,
                                            comm_.options().timeout_s);
  // Each shard's optimizer over its span, its state tensors in the shard.
  Optimizer::StateElsewhere bound_below;
  for (int k = 0; k < store_->shards(); ++k) {
    const ElemSpan s = store_->shard(k);
    auto opt = make_optimizer(optimizer_cfg_, s.begin, s.end, layout, Device::cpu());
    std::vector<OptimizerState> st = opt->state();
    MT_CHECK(static_cast<int>(st.size()) == states, "optimizer {} has {} state tensors, the memory "
             "model counts {}", opt->type(), st.size(), states);
    for (int i = 0; i < states; ++i) {
      auto storage = Storage::borrow(store_->state(k, i), static_cast<size_t>(s.count()) * 4);
      *st[static_cast<size_t>(i)].tensor = Tensor(storage, 0, {s.count()}, DType::F32);
    }
    optimizers_.push_back(std::move(opt));
  }
}

void ParameterServer::zero_grad() {
  MT_CHECK(model_, "attach() a model before zero_grad()");
  model_->zero_grad();
}

float* ParameterServer::gradients() {
  MT_CHECK(model_, "attach() a model first");
  return model_->grad_buffer().data<float>();
}

ElemSpan ParameterServer::update_range() const { return {0, model_ ? model_->layout().numel : 0}; }

void ParameterServer::after_resume() {
  MT_CHECK(model_, "attach() a model before after_resume()");
  comm_.broadcast(model_->param_buffer(), /*root=*/0).wait();
  store_->publish(model_->param_buffer().data<float>());
}

void ParameterServer::apply(int shard, const float* mean_grads, float lr, int64_t version) {
  Optimizer& opt = *optimizers_[static_cast<size_t>(shard)];
  const ElemSpan s = store_->shard(shard);
  // The optimizer indexes whole flat buffers from element 0 and touches only
  // [s.begin, s.end): the shard's arrays, offset back by s.begin, stand in for them.
  opt.set_steps_taken(version);  // bias correction counts the shard's updates
  opt.step(store_->params(shard) - s.begin, mean_grads - s.begin, lr, 1.0f);
}

void ParameterServer::apply_update(const float* grads, float grad_scale, float lr) {
  store_->push(grads, grad_scale, lr, /*valid=*/true,
               [this](int k, const float* g, float l, int64_t v) { apply(k, g, l, v); });
  ++steps_taken_;
}

void ParameterServer::update_skipped() {
  // The round still completes without this worker's gradients.
  store_->push(nullptr, 1.0f, 0.0f, /*valid=*/false,
               [this](int k, const float* g, float l, int64_t v) { apply(k, g, l, v); });
  ++steps_taken_;
}

std::optional<int64_t> ParameterServer::claim_step(int64_t total_steps) {
  MT_CHECK(model_, "attach() a model first");
  const std::optional<int64_t> ticket = store_->claim_ticket(total_steps * comm_.size());
  if (!ticket) {
    store_->leave([this](int k, const float* g, float l, int64_t v) { apply(k, g, l, v); });
    return std::nullopt;
  }
  store_->pull(model_->param_buffer().data<float>());
  return *ticket / comm_.size();
}

void ParameterServer::finish_async() {
  comm_.barrier().wait();  // every worker's last push applied
  store_->read_all(model_->param_buffer().data<float>());
}

void ParameterServer::gather_full_parameters() { finish_async(); }

void ParameterServer::verify_replicas() {
  check_replicas_equal(comm_, model_->param_buffer(), "parameter server, final parameters");
}

std::string ParameterServer::async_report() const {
  const StalenessStats s = store_->staleness_stats();
  return fmt::format("parameter server: {} updates per shard from {} pushed gradients; staleness "
                     "mean {:.2f}, max {} (bound {})", s.updates, s.gradients / store_->shards(), s.mean,
                     s.max, opts_.staleness);
}

}  // namespace meshtrain::parallel
