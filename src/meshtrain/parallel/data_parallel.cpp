#include "meshtrain/parallel/data_parallel.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "meshtrain/core/error.h"
#include "meshtrain/kernels/kernel_table.h"
#include "meshtrain/nn/model.h"
#include "meshtrain/telemetry/trace_writer.h"

namespace meshtrain::parallel {

namespace {

int64_t elements(size_t bytes) { return std::max<int64_t>(1, static_cast<int64_t>(bytes / sizeof(float))); }

// Order-sensitive 64-bit hash of the parameter bits (exact equality, not closeness).
int64_t checksum(const float* p, int64_t n) {
  uint64_t h = 0x9E3779B97F4A7C15ull;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t w;
    std::memcpy(&w, p + i, sizeof(w));
    h = (h ^ w) * 0x100000001B3ull;
    h ^= h >> 29;
  }
  return static_cast<int64_t>(h >> 1);  // non-negative: Max/Min compare it as a signed value
}

}  // namespace

DataParallelOptions DataParallelOptions::from_env() {
  DataParallelOptions o;
  auto set = [](const char* name) {
    const char* s = std::getenv(name);
    return s && *s && std::strcmp(s, "0") != 0;
  };
  o.verify = set("MESHTRAIN_DEBUG") || set("MESHTRAIN_COMM_DEBUG");
  return o;
}

DataParallel::DataParallel(comm::Communicator comm, int64_t num_params, DataParallelOptions opts)
    : comm_(std::move(comm)), opts_(opts), num_params_(num_params) {
  MT_CHECK(comm_.valid(), "data parallelism needs a valid communicator");
  MT_CHECK(num_params_ > 0, "data parallelism needs a model with parameters");
  buckets_ = plan_buckets(num_params_, elements(opts_.first_bucket_bytes), elements(opts_.bucket_bytes));
  // Collective: every rank maps every peer's gradient buffer.
  shared_grads_ = comm_.alloc_shared(static_cast<size_t>(num_params_) * sizeof(float));
  grads_counted_.set(num_params_ * static_cast<int64_t>(sizeof(float)));
  MT_CHECK(opts_.grad_dtype == DType::F32 || opts_.grad_dtype == DType::BF16,
           "gradient reduction dtype must be f32 or bf16, got {}", dtype_name(opts_.grad_dtype));
  if (opts_.grad_dtype == DType::BF16) {
    wire_ = comm_.alloc_shared(static_cast<size_t>(num_params_) * sizeof(uint16_t));
    wire_counted_.set(num_params_ * static_cast<int64_t>(sizeof(uint16_t)));
  }
  clock_ = std::make_unique<CompletionClock>();
}

// The model is usually destroyed first (it lives on our gradient buffer), so
// nothing here touches it: see detach().
DataParallel::~DataParallel() {
  // Reductions still in flight (a step abandoned by an error) must not write
  // into freed memory: let them finish or fail before the buffer goes away.
  for (auto& w : works_) {
    try {
      w.wait();
    } catch (...) {
    }
  }
}

Tensor DataParallel::gradient_buffer() const { return shared_grads_.tensor(DType::F32, num_params_); }

void DataParallel::attach(Model& model) {
  MT_CHECK(model.layout().numel == num_params_,
           "data parallelism was set up for {} parameters, the model has {}", num_params_,
           model.layout().numel);
  model_ = &model;
  model.set_grad_ready_hook([this](int64_t b, int64_t e) { on_grad_ready(b, e); });
}

void DataParallel::detach() {
  if (!model_) return;
  model_->set_grad_ready_hook(nullptr);
  model_ = nullptr;
}

void DataParallel::broadcast_parameters() {
  MT_CHECK(model_, "attach() a model before broadcast_parameters()");
  comm_.broadcast(model_->param_buffer(), /*root=*/0).wait();
  if (opts_.verify) verify_parameters_equal();
}

void DataParallel::verify_parameters_equal() {
  MT_CHECK(model_, "attach() a model before verify_parameters_equal()");
  const Tensor& p = model_->param_buffer();
  const int64_t mine = checksum(p.data<float>(), p.numel());
  const int64_t hi = comm_.allreduce_scalar(mine, comm::ReduceOp::Max);
  const int64_t lo = comm_.allreduce_scalar(mine, comm::ReduceOp::Min);
  MT_CHECK(hi == lo, "data-parallel ranks hold different parameters (rank {} checksum {:x}, range "
           "{:x}..{:x}): the replicas diverged", rank(), mine, lo, hi);
}

void DataParallel::zero_grad() {
  MT_CHECK(model_, "attach() a model before zero_grad()");
  model_->zero_grad();
}

const float* DataParallel::gradients() {
  MT_CHECK(model_, "attach() a model first");
  return model_->grad_buffer().data<float>();
}

double DataParallel::end_backward(bool last_micro_batch) {
  if (!last_micro_batch) return 0;
  telemetry::TraceScope wait(telemetry::global_tracer(), "wait gradients", "comm");
  finish_gradients();
  return timing_.exposed_s;
}

void DataParallel::begin_backward(bool last_micro_batch) {
  armed_ = last_micro_batch;
  if (!armed_) return;
  MT_CHECK(works_.empty(), "begin_backward(last) twice without finish_gradients()");
  next_bucket_ = 0;
  before_last_report_ = 0;
  frontier_ = num_params_;
  launched_at_.clear();
  clock_->reset();
  backward_start_ = steady_now_s();
}

void DataParallel::on_grad_ready(int64_t begin, int64_t end) {
  if (!armed_) return;
  // Backward reports finished ranges from the top of the buffer down, each
  // ending where the previous began; anything else would launch a bucket
  // that is still being written.
  MT_CHECK(end == frontier_ && begin <= end && begin >= 0,
           "grad-ready range [{}, {}) does not continue the finished range from {}", begin, end,
           frontier_);
  frontier_ = begin;
  // Whatever was launched before this report overlaps the backward that
  // produced it; only the step's last report has nothing left behind it.
  before_last_report_ = next_bucket_;
  launch_through(frontier_);
}

void DataParallel::launch_through(int64_t frontier) {
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].begin >= frontier) {
    const Bucket& b = buckets_[next_bucket_++];
    float* g = model_->grad_buffer().data<float>() + b.begin;
    launched_at_.push_back(steady_now_s());
    if (wire_) {
      uint16_t* w = wire_.as<uint16_t>() + b.begin;
      kernels_for(model_->grad_buffer().device())
          .to_half(default_stream(model_->grad_buffer().device()), HalfFormat::BF16, g, w, b.count());
      works_.push_back(comm_.allreduce(w, static_cast<size_t>(b.count()), DType::BF16, comm::ReduceOp::Avg));
    } else {
      works_.push_back(comm_.allreduce(g, static_cast<size_t>(b.count()), DType::F32, comm::ReduceOp::Avg));
    }
    TraceLabel label;
    if (telemetry::Tracer* t = telemetry::global_tracer(); t && t->enabled()) {
      const size_t bytes = static_cast<size_t>(b.count()) * dtype_size(opts_.grad_dtype);
      const size_t index = next_bucket_ - 1;
      label = {fmt::format("allreduce bucket {}", index),
               {{"bytes", bytes}, {"algorithm", comm_.algorithm_for(comm::CollOp::Allreduce, bytes)},
                {"bucket", index}, {"transport", std::string(comm_.transport())}},
               launched_at_.back()};
    }
    clock_->watch(works_.back(), std::move(label));
  }
}

void DataParallel::finish_gradients() {
  MT_CHECK(model_, "attach() a model before finish_gradients()");
  MT_CHECK(armed_, "finish_gradients() without begin_backward(last_micro_batch = true)");
  const double t0 = steady_now_s();
  // Backward has returned: which reductions are already running beside it.
  int started = 0;
  for (const comm::Work& w : works_) started += w.started() ? 1 : 0;
  const int ahead = static_cast<int>(before_last_report_);
  launch_through(0);  // a model that reports nothing still gets reduced
  armed_ = false;
  std::vector<comm::Work> works = std::move(works_);
  works_.clear();
  comm::wait_all(works);
  if (wire_)  // the reduced bf16 gradients back into the f32 buffer
    kernels_for(model_->grad_buffer().device())
        .from_half(default_stream(model_->grad_buffer().device()), HalfFormat::BF16, wire_.as<uint16_t>(), model_->grad_buffer().data<float>(), num_params_);
  const double t1 = steady_now_s();
  // The engine runs buckets in issue order, so bucket i ran from
  // max(its launch, bucket i-1's completion) to its own completion.
  const std::vector<double> done = clock_->stamps();
  timing_ = {};
  timing_.buckets = static_cast<int>(done.size());
  timing_.exposed_s = t1 - t0;
  timing_.backward_s = t0 - backward_start_;
  timing_.first_launch_s = launched_at_.empty() ? 0 : launched_at_[0] - backward_start_;
  timing_.launched_ahead = ahead;
  timing_.started_in_backward = started;
  double prev = 0;
  for (size_t i = 0; i < done.size(); ++i) {
    const double start = std::max(launched_at_[i], prev);
    timing_.total_s += std::max(0.0, done[i] - start);
    prev = done[i];
  }
}

std::string DataParallel::describe() const {
  auto size = [](double bytes) {
    return bytes < (1 << 20) ? fmt::format("{:.1f} KiB", bytes / 1024)
                             : fmt::format("{:.1f} MiB", bytes / (1 << 20));
  };
  return fmt::format("data parallel: {} ranks over {}, {} gradient bucket(s) (first {}, then up to "
                     "{}) in shared memory, reduced during backward", comm_.size(),
                     comm_.transport(), buckets_.size(), size(buckets_.front().count() * 4.0),
                     size(static_cast<double>(opts_.bucket_bytes)));
}

double DataParallel::average(double value) { return comm_.allreduce_scalar(value, comm::ReduceOp::Avg); }

bool DataParallel::all(bool value) {
  return comm_.allreduce_scalar(static_cast<int64_t>(value ? 1 : 0), comm::ReduceOp::Min) == 1;
}

}  // namespace meshtrain::parallel
