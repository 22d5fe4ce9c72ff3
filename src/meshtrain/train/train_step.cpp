#include "meshtrain/train/train_step.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <ranges>

#include "meshtrain/core/device_runtime.h"
#include "meshtrain/kernels/kernel_table.h"
#include "meshtrain/optim/grad_clip.h"
#include "meshtrain/parallel/zero_layout.h"
#include "meshtrain/telemetry/trace_writer.h"

namespace meshtrain {

namespace {
double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

GradientCheck check_gradients(double loss, const float* grads, int64_t begin, int64_t end,
                              comm::Communicator* comm, bool sharded) {
  return check_gradients(loss, grads, begin, end, comm, sharded, {});
}

namespace {
// The parameters whose squares this rank leaves to another: replicated ones
// on tp ranks other than 0, a tied one held first by another stage; merged,
// so a range in both lists is subtracted once.
std::vector<ElemSpan> counted_by_others(const TensorParallelNorm& mp) {
  std::vector<ElemSpan> out = mp.counted_elsewhere;
  if (mp.tp && mp.tp->rank() != 0) out.insert(out.end(), mp.replicated.begin(), mp.replicated.end());
  std::sort(out.begin(), out.end(), [](ElemSpan a, ElemSpan b) { return a.begin < b.begin; });
  std::vector<ElemSpan> merged;
  for (const ElemSpan& r : out) {
    if (!merged.empty() && r.begin <= merged.back().end)
      merged.back().end = std::max(merged.back().end, r.end);
    else
      merged.push_back(r);
  }
  return merged;
}

// Squares of grads[b, e) that this rank contributes.
double own_squares(const float* grads, int64_t b, int64_t e, const std::vector<ElemSpan>& others,
                   Device device) {
  const KernelTable& k = kernels_for(device);
  const Stream s = default_stream(device);
  double sq = k.sum_squares(s, grads + b, e - b);
  // Non-finite values must reach every rank's decision, so they are kept
  // out of the subtraction below (inf - inf would hide them as NaN anyway).
  if (std::isfinite(sq))
    for (const ElemSpan& r : others) {
      const int64_t rb = std::max(r.begin, b), re = std::min(r.end, e);
      if (rb < re) sq -= k.sum_squares(s, grads + rb, re - rb);
    }
  return sq;
}
}  // namespace

GradientCheck check_gradients(double loss, const float* grads, int64_t begin, int64_t end,
                              comm::Communicator* comm, bool sharded, const TensorParallelNorm& tp,
                              Device device) {
  GradientCheck c;
  // The norm is summed the same way whatever the strategy, so that data
  // parallelism and ZeRO clip by the bit-identical coefficient: one partial
  // sum per ZeRO range of the data-parallel group (sum_squares' f32 chunks
  // start at each range), added in rank order. Sharded, each rank computes
  // its own slot and the slots are gathered by a sum in which every slot
  // has one non-zero term (exact in any order); replicated, each rank
  // computes every slot itself.
  const int n = comm ? comm->size() : 1;
  const std::vector<ElemSpan> others = counted_by_others(tp);
  std::vector<double> partial(static_cast<size_t>(n), 0.0);
  if (sharded && comm) {
    partial[static_cast<size_t>(comm->rank())] = own_squares(grads, begin, end, others, device);
    comm->allreduce(partial.data(), partial.size(), DType::F64, comm::ReduceOp::Sum).wait();
  } else {
    for (int r = 0; r < n; ++r) {
      const ElemSpan s = parallel::ZeroLayout(end - begin, n, r).own();
      partial[static_cast<size_t>(r)] = own_squares(grads, begin + s.begin, begin + s.end, others, device);
    }
  }
  double sq = 0.0;
  for (double p : partial) sq += p;
  const bool finite = std::isfinite(sq);
  if (tp.tp) sq = tp.tp->allreduce_scalar(sq, comm::ReduceOp::Sum);
  if (tp.pp) sq = tp.pp->allreduce_scalar(sq, comm::ReduceOp::Sum);
  c.norm = std::sqrt(std::max(0.0, sq));
  c.finite = std::isfinite(loss) && finite && std::isfinite(sq);
  // Every rank must skip (or not) together, so the decision is reduced too.
  for (comm::Communicator* g : {comm, tp.tp, tp.pp})
    if (g) c.finite = g->allreduce_scalar(int64_t{c.finite}, comm::ReduceOp::Min) == 1;
  return c;
}

void TrainStep::set_tensor_parallel(const comm::Communicator* tp,
                                    const parallel::CommTensorParallelGroup* group) {
  tp_norm_.tp = nullptr;
  tp_norm_.replicated.clear();
  tp_group_ = group;
  if (!tp || !tp->valid() || tp->size() == 1) return;
  tp_comm_ = *tp;  // a handle on the same group
  tp_norm_.tp = &tp_comm_;
  for (const ParamInfo& p : model_.layout().params)
    if (p.split_dim < 0) tp_norm_.replicated.push_back({p.begin, p.end()});
  update_norm_group();
}

void TrainStep::update_norm_group() {
  // The data-parallel slots are the ZeRO ranges whether or not this rank
  // holds only its own (check_gradients' order, so DP and ZeRO agree).
  NormGroup g;
  comm::Communicator* comm = sync_.comm();
  const int n = comm ? comm->size() : 1;
  const int64_t total = model_.layout().numel;
  for (int r = 0; r < n; ++r) g.slots.push_back(parallel::ZeroLayout(total, n, r).own());
  if (sync_.sharded() && comm) {
    g.own = comm->rank();
    g.shards = comm;
    MT_CHECK(g.slots[static_cast<size_t>(g.own)] == sync_.update_range(), "the update range is "
             "not this rank's ZeRO range: per-layer norms would miss pieces");
  }
  g.tp = tp_norm_.tp;
  for (const ParamInfo& p : model_.layout().params) g.tp_replicated.push_back(p.split_dim < 0);
  opt_->set_norm_group(std::move(g));
}

namespace {
// Each pipeline chunk's forward and backward parameter uses (its layout's
// order split in its two passes), in the units of the rank's whole buffer.
std::vector<std::array<std::vector<ParamUse>, 2>> pipeline_pass_orders(Model& rank) {
  std::vector<std::array<std::vector<ParamUse>, 2>> out;
  const ParamLayout& whole = rank.layout();
  for (Model* chunk : rank.pipeline_chunks()) {
    const int64_t at = chunk->param_buffer().data<float>() - rank.param_buffer().data<float>();
    int first = -1;
    for (int u = 0; u < whole.num_units(); ++u)
      if (whole.units[static_cast<size_t>(u)].begin == at) first = u;
    MT_CHECK(first >= 0 || chunk->layout().units.empty(), "pipeline chunk at element {} starts no "
             "parameter unit of its rank", at);
    std::array<std::vector<ParamUse>, 2> passes;
    for (ParamUse use : chunk->layout().order) {
      use.unit += first;
      passes[use.backward ? 1 : 0].push_back(use);
    }
    out.push_back(std::move(passes));
  }
  return out;
}
}  // namespace

void TrainStep::set_pipeline(parallel::PipelineExecutor* exec, const comm::Communicator* pp) {
  pipe_ = exec;
  tp_norm_.pp = nullptr;
  tp_norm_.counted_elsewhere.clear();
  if (!exec) return;
  MT_CHECK(pp && pp->valid(), "a pipeline step needs its pipeline group");
  // Each stage's replicas reduce their gradients around every backward, as
  // the micro-batch loop does without a pipeline.
  // Each backward writes its chunk's part of the buffer (all of it with one chunk).
  exec->set_backward_hooks({[this](bool last, const Model& chunk) {
                              const int64_t at = chunk.grad_buffer().data<float>() -
                                                 model_.grad_buffer().data<float>();
                              sync_.set_backward_span({at, at + chunk.grad_buffer().numel()});
                              sync_.begin_backward(last);
                            },
                            [this](bool last) { return sync_.end_backward(last); },
                            [this](int chunk, bool backward) {
                              sync_.set_parameter_pass(pass_orders_[static_cast<size_t>(chunk)][backward]);
                            }});
  pass_orders_ = pipeline_pass_orders(model_);
  pp_comm_ = *pp;
  tp_norm_.pp = &pp_comm_;
  // The norm counts a tied parameter once: by its first holder.
  tp_norm_.counted_elsewhere.clear();
  for (const ParamInfo& p : model_.layout().params) {
    if (exec->tied_elsewhere_first(p.name)) tp_norm_.counted_elsewhere.push_back({p.begin, p.end()});
  }
}

TrainStep::TrainStep(Model& model, parallel::GradientSync& sync, const OptimizerConfig& optimizer,
                     LrSchedule schedule, float clip)
    : model_(model), sync_(sync), schedule_(schedule), clip_(clip) {
  const ElemSpan r = sync_.update_range();
  // A strategy that applies the update itself keeps the state: this
  // optimizer then allocates none (it only names the type).
  std::optional<Optimizer::StateElsewhere> stateless;
  if (sync_.applies_update()) stateless.emplace();
  opt_ = make_optimizer(optimizer, r.begin, r.end, model.layout(), model.param_buffer().device());
  update_norm_group();
}

StepStats TrainStep::run(const std::vector<MicroBatch>& micro, int64_t step) {
  MT_CHECK(!micro.empty(), "a step needs at least one micro-batch");
  StepStats st;
  sync_.zero_grad();
  double loss_sum = 0.0;
  double waited_total = 0;  // every micro-batch's wait for the gradient reductions
  // fp16: the loss (so every gradient) is scaled up; divided out below.
  const float loss_scale = mp_ ? mp_->loss_scale() : 1.0f;
  const float scale = loss_scale / static_cast<float>(micro.size());
  sync_.set_gradient_scale(loss_scale);
  comm::Communicator* comm = sync_.comm();
  // Token weighting: each micro-batch's share of the step's targets (all
  // data-parallel ranks), times dp since the gradient sync averages.
  std::vector<int64_t> counts(micro.size(), 0);
  double total = 0;
  if (token_weighted_) {
    int64_t local = 0;
    for (size_t i = 0; i < micro.size(); ++i) {
      const MicroBatch& m = micro[i];
      const int64_t n = static_cast<int64_t>(m.B) * m.T;
      for (int64_t j = 0; j < n; ++j) counts[i] += m.targets && m.targets[j] >= 0;
      local += counts[i];
    }
    total = static_cast<double>(comm ? comm->allreduce_scalar(local, comm::ReduceOp::Sum) : local);
    MT_CHECK(total > 0, "step {}: every target of the step's {} micro-batch(es) on every rank is "
             "masked (no response token): nothing to learn from; check the instruction data",
             step + 1, micro.size());
  }
  const double dp = comm ? comm->size() : 1;
  // Tensor-parallel collectives run inside forward and backward: their time
  // is its own phase (tp_comm_s), not compute.
  auto tp_seconds = [&] { return tp_group_ ? tp_group_->seconds() : 0.0; };
  // The parameters stay put until the update: micro-batches after the first
  // reuse the 16-bit copy the first one rounded.
  struct Hold {
    Model& m;
    explicit Hold(Model& model) : m(model) { m.hold_parameters(true); }
    ~Hold() { m.hold_parameters(false); }
  };
  if (pipe_) {
    // The schedule runs every micro-batch's forward and backward; the last
    // stage's losses reach every stage (the others contribute 0). Token
    // weighting scales each micro-batch's backward as the loop below does.
    Hold hold(model_);
    std::vector<float> scales(micro.size(), scale);
    for (size_t i = 0; token_weighted_ && i < micro.size(); ++i)
      scales[i] = static_cast<float>(loss_scale * dp * counts[i] / total);
    const std::vector<float> losses = pipe_->run(micro, scales);
    const bool last = pp_comm_.rank() + 1 == pp_comm_.size();
    for (size_t i = 0; last && i < losses.size(); ++i)
      loss_sum += token_weighted_ ? static_cast<double>(losses[i]) * counts[i] : losses[i];
    loss_sum = pp_comm_.allreduce_scalar(loss_sum, comm::ReduceOp::Sum);
    st.forward_s = pipe_->timing().compute_s;  // forward and backward together
    st.pp_wait_s = pipe_->timing().recv_wait_s + pipe_->timing().tied_s;
    waited_total = pipe_->timing().sync_wait_s;
  }
  for (Hold hold(model_); size_t i : std::views::iota(size_t{0}, pipe_ ? size_t{0} : micro.size())) {
    const double t0 = now_s(), tp0 = tp_seconds();
    const float mean = model_.forward(micro[i]);
    // Token-weighted: the micro-batch's target sum, to be divided by the total.
    loss_sum += token_weighted_ ? static_cast<double>(mean) * counts[i] : mean;
    const double t1 = now_s(), tp1 = tp_seconds();
    const bool last = i + 1 == micro.size();
    sync_.begin_backward(last);
    model_.backward(token_weighted_ ? static_cast<float>(loss_scale * dp * counts[i] / total) : scale);
    settle_device();
    const double t2 = now_s(), tp2 = tp_seconds();
    // Communication the backward could not hide: not counted as backward.
    const double waited = sync_.end_backward(last);
    waited_total += waited;
    st.forward_s += (t1 - t0) - (tp1 - tp0);
    st.backward_s += (t2 - t1) - (tp2 - tp1);
    st.tp_comm_s += tp2 - tp0;
  }
  slow_.delay(st.forward_s + st.backward_s);
  double loss = token_weighted_ ? loss_sum : loss_sum / micro.size();
  st.comm = sync_.timing();
  st.comm.exposed_s = waited_total;  // counted once: what backward_s leaves out
  // Time spent waiting for a reduction is time it ran: the completion stamps
  // (a helper thread's) can trail the waiter's wake-up by microseconds.
  st.comm.total_s = std::max(st.comm.total_s, st.comm.exposed_s);
  if (token_weighted_)
    loss = (comm ? comm->allreduce_scalar(loss, comm::ReduceOp::Sum) : loss) / total;
  else if (comm)
    loss = comm->allreduce_scalar(loss, comm::ReduceOp::Avg);
  double t2 = now_s();  // optimizer time excludes the exposed communication
  st.loss = static_cast<float>(loss);
  // Replicated gradients are already averaged (the local norm is the global
  // one); sharded ones are checked per range and the squares summed.
  const float* g = sync_.gradients();
  if (mp_)
    mp_->maybe_inject_overflow(step, comm ? comm->rank() : 0, const_cast<float*>(g), opt_->begin(),
                               opt_->end(), model_.grad_buffer().device());
  const GradientCheck check = check_gradients(loss, g, opt_->begin(), opt_->end(), comm,
                                              sync_.sharded(), tp_norm_, model_.grad_buffer().device());
  st.grad_norm = check.norm / loss_scale;
  st.lr = schedule_.at(step);
  st.finite = check.finite;
  st.loss_scale = loss_scale;
  // fp16: the loss scaler sees the reduced flag, so every rank skips alike.
  const bool apply = mp_ ? mp_->decide(check.finite) : check.finite;
  if (!apply) sync_.update_skipped();
  st.overflow_skipped = mp_ && mp_->last_was_overflow();
  if (apply) {
    if (before_update_) {
      telemetry::TraceScope wait(telemetry::global_tracer(), "wait checkpoint snapshot", "io");
      st.update_wait_s = before_update_();
    }
    telemetry::TraceScope trace(telemetry::global_tracer(), "optimizer", "compute");
    sync_.before_update();
    const float grad_scale = clip_coefficient(st.grad_norm, clip_) / loss_scale;
    if (sync_.applies_update())
      sync_.apply_update(g, grad_scale, st.lr);
    else
      opt_->step(model_.param_buffer().data<float>(), g, st.lr, grad_scale);
    sync_.after_update();  // ZeRO: gathers the updated parameters (async)
    // Local SGD communicates here, in the update: its bytes for this step.
    st.comm.wire_bytes = sync_.timing().wire_bytes;
    st.comm.dense_bytes = sync_.timing().dense_bytes;
  }
  settle_device();
  st.optimizer_s = now_s() - t2;
  return st;
}

void TrainStep::settle_device() const {
  const Device d = model_.param_buffer().device();
  if (!d.is_cpu()) runtime_for(d).synchronize(default_stream(d));
}

}  // namespace meshtrain
