#include "meshtrain/parallel/data_parallel.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "meshtrain/comm/wire_bytes.h"
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

DataParallel::DataParallel(comm::Communicator comm, int64_t num_params, DataParallelOptions opts,
                           const ParamLayout* layout)
    : comm_(std::move(comm)), opts_(opts), num_params_(num_params) {
  MT_CHECK(comm_.valid(), "data parallelism needs a valid communicator");
  MT_CHECK(num_params_ > 0, "data parallelism needs a model with parameters");
  // Collective: every rank maps every peer's gradient buffer.
  shared_grads_ = comm_.alloc_shared(static_cast<size_t>(num_params_) * sizeof(float));
  grads_counted_.set(num_params_ * static_cast<int64_t>(sizeof(float)));
  codec_ = make_gradient_codec(opts_.compression, opts_.grad_dtype,
                               {&comm_, layout, num_params_, [this](const comm::Work& w) { watch(w); }});
  const int64_t first = elements(opts_.first_bucket_bytes), cap = elements(opts_.bucket_bytes);
  if (codec_->whole_tensors() && layout) {
    std::vector<int64_t> cuts;
    for (const ParamInfo& p : layout->params) cuts.push_back(p.begin);
    std::sort(cuts.begin(), cuts.end());
    buckets_ = plan_buckets_on(cuts, num_params_, first, cap);
  } else {
    buckets_ = plan_buckets(num_params_, first, cap);
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
  reductions_.clear();
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

float* DataParallel::gradients() {
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
  MT_CHECK(reductions_.empty(), "begin_backward(last) twice without finish_gradients()");
  codec_->begin_step();
  counted_at_begin_ = comm_.counters();
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
  float* grads = model_->grad_buffer().data<float>();
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].begin >= frontier) {
    const Bucket& b = buckets_[next_bucket_++];
    // The codecs with a second round launch it here, before the next bucket:
    // the same collective order on every rank.
    for (auto& r : reductions_) r->launch_next_round();
    reductions_.push_back(codec_->start(grads, {b.begin, b.end}));
  }
}

// Every collective a codec launches: its launch time, the completion clock,
// and the trace label.
void DataParallel::watch(const comm::Work& work) {
  works_.push_back(work);
  launched_at_.push_back(steady_now_s());
  TraceLabel label;
  if (telemetry::Tracer* t = telemetry::global_tracer(); t && t->enabled()) {
    const size_t index = next_bucket_ - 1;  // "allreduce bucket 3", "allgather bucket 3"
    const comm::OpInfo* op = work.info();
    label = {fmt::format("{} bucket {}", op ? op->kind : "collective", index),
             {{"bytes", op ? op->bytes : 0}, {"algorithm", op ? std::string(op->algo) : ""},
              {"bucket", index}, {"codec", codec_->name()}, {"transport", std::string(comm_.transport())}},
             launched_at_.back()};
  }
  clock_->watch(work, std::move(label));
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
  std::vector<std::unique_ptr<BucketReduction>> reductions = std::move(reductions_);
  reductions_.clear();
  for (auto& r : reductions) r->launch_next_round();  // in launch order, as on every rank
  for (auto& r : reductions) r->finish();
  works_.clear();
  const double t1 = steady_now_s();
  // The engine runs collectives in issue order, so collective i ran from
  // max(its launch, collective i-1's completion) to its own completion.
  const std::vector<double> done = clock_->stamps();
  timing_ = {};
  timing_.buckets = static_cast<int>(buckets_.size());
  timing_.exposed_s = t1 - t0;
  timing_.backward_s = t0 - backward_start_;
  timing_.first_launch_s = launched_at_.empty() ? 0 : launched_at_[0] - backward_start_;
  timing_.launched_ahead = ahead;
  timing_.started_in_backward = started;
  double prev = 0;
  for (size_t i = 0; i < done.size() && i < launched_at_.size(); ++i) {
    const double start = std::max(launched_at_[i], prev);
    timing_.total_s += std::max(0.0, done[i] - start);
    prev = done[i];
  }
  const comm::CommCounters now = comm_.counters();
  timing_.wire_bytes = 0;
  for (size_t op = 0; op < comm::kCollOpCount; ++op)
    timing_.wire_bytes += comm::bytes_sent_per_rank(static_cast<comm::CollOp>(op),
                                                    now.bytes[op] - counted_at_begin_.bytes[op], size());
  timing_.dense_bytes = comm::bytes_sent_per_rank(comm::CollOp::Allreduce,
                                                  static_cast<size_t>(num_params_) * sizeof(float), size());
}

std::string DataParallel::describe() const {
  auto size = [](double bytes) {
    return bytes < (1 << 20) ? fmt::format("{:.1f} KiB", bytes / 1024)
                             : fmt::format("{:.1f} MiB", bytes / (1 << 20));
  };
  return fmt::format("data parallel: {} ranks over {}, {} gradient bucket(s) (first {}, then up to "
                     "{}) in shared memory, reduced during backward; {}", comm_.size(),
                     comm_.transport(), buckets_.size(), size(buckets_.front().count() * 4.0),
                     size(static_cast<double>(opts_.bucket_bytes)), codec_->describe());
}

double DataParallel::average(double value) { return comm_.allreduce_scalar(value, comm::ReduceOp::Avg); }

bool DataParallel::all(bool value) {
  return comm_.allreduce_scalar(static_cast<int64_t>(value ? 1 : 0), comm::ReduceOp::Min) == 1;
}

}  // namespace meshtrain::parallel
