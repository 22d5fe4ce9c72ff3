#include "meshtrain/train/optimizer_step.h"

#include <chrono>
#include <cmath>

#include "meshtrain/kernels/cpu/reduce.h"
#include "meshtrain/optim/grad_clip.h"
#include "meshtrain/telemetry/trace_writer.h"

namespace meshtrain {

namespace {
double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

std::vector<ParamSegment> gpt_param_segments(const GPTParams& params) {
  std::vector<ParamSegment> segs;
  const int64_t base = params.flat.offset();
  for (const auto& [name, t] : params.named()) {
    ParamSegment s{t.offset() - base, t.offset() - base + t.numel(), t.ndim() >= 2};
    // Merge with the previous run when the decay setting agrees.
    if (!segs.empty() && segs.back().end == s.begin && segs.back().decay == s.decay)
      segs.back().end = s.end;
    else
      segs.push_back(s);
  }
  return segs;
}

GradientCheck check_gradients(double loss, const float* grads, int64_t begin, int64_t end,
                              comm::Communicator* comm, bool sharded) {
  GradientCheck c;
  double sq = cpu::sum_squares(grads + begin, end - begin);
  if (sharded && comm) sq = comm->allreduce_scalar(sq, comm::ReduceOp::Sum);
  c.norm = std::sqrt(sq);
  c.finite = std::isfinite(loss) && std::isfinite(sq);
  // Every rank must skip (or not) together, so the decision is reduced too.
  if (comm) c.finite = comm->allreduce_scalar(int64_t{c.finite}, comm::ReduceOp::Min) == 1;
  return c;
}

OptimizerStep::OptimizerStep(GPT& model, AdamWConfig adam, LrSchedule schedule, float clip,
                             parallel::DataParallel* dp, parallel::Zero* zero)
    : model_(model), schedule_(schedule), clip_(clip), dp_(dp), zero_(zero) {
  MT_CHECK(!(dp && zero), "an optimizer step uses data parallelism or ZeRO, not both");
  int64_t begin = 0, end = model.config().num_params();
  if (zero_) begin = zero_->own().begin, end = zero_->own().end;
  opt_ = std::make_unique<AdamW>(begin, end, gpt_param_segments(model.params()), adam);
}

StepStats OptimizerStep::run(const std::vector<MicroBatch>& micro, int64_t step) {
  MT_CHECK(!micro.empty(), "a step needs at least one micro-batch");
  StepStats st;
  if (zero_) {
    zero_->zero_grad();
  } else {
    model_.zero_grad();
  }
  double loss_sum = 0.0;
  double zero_waited = 0;  // every micro-batch's wait for ZeRO's gradient reductions
  // fp16: the loss (so every gradient) is scaled up; divided out below.
  const float loss_scale = mp_ ? mp_->loss_scale() : 1.0f;
  const float scale = loss_scale / static_cast<float>(micro.size());
  for (size_t i = 0; i < micro.size(); ++i) {
    const MicroBatch& mb = micro[i];
    double t0 = now_s();
    loss_sum += model_.forward(mb.inputs, mb.targets, mb.B, mb.T);
    double t1 = now_s();
    // Buckets are reduced during the last micro-batch's backward only.
    const bool last = i + 1 == micro.size();
    if (dp_) dp_->begin_backward(last);
    if (zero_) zero_->begin_backward(last);
    model_.backward(scale);
    double waited = 0;  // ZeRO's wait for reductions: communication, not backward
    if (zero_) {
      // Stages 2/3 reduce every micro-batch; stage 1 waits after the last.
      telemetry::TraceScope wait(telemetry::global_tracer(), "wait gradients", "comm");
      const double w0 = now_s();
      zero_->end_backward(last);
      waited = now_s() - w0;
      zero_waited += waited;
    }
    st.forward_s += t1 - t0;
    st.backward_s += now_s() - t1 - waited;
  }
  double loss = loss_sum / micro.size();
  if (dp_) {
    telemetry::TraceScope wait(telemetry::global_tracer(), "wait gradients", "comm");
    dp_->finish_gradients();  // from here on every rank holds the averaged gradient
    st.comm = dp_->timing();
    loss = dp_->average(loss);
  }
  if (zero_) {
    st.comm = zero_->timing();
    // Counted once: what backward_s above leaves out (all micro-batches' waits).
    st.comm.exposed_s = zero_waited;
    loss = zero_->comm().allreduce_scalar(loss, comm::ReduceOp::Avg);
  }
  double t2 = now_s();  // optimizer time excludes the exposed communication
  st.loss = static_cast<float>(loss);
  // With data parallelism the reduced gradient is replicated (the local norm
  // is the global one); with ZeRO each rank checks its own range.
  const float* g = zero_ ? zero_->gradients() : model_.grads().flat.data<float>();
  comm::Communicator* comm = zero_ ? &zero_->comm() : dp_ ? &dp_->comm() : nullptr;
  if (mp_)
    mp_->maybe_inject_overflow(step, comm ? comm->rank() : 0, const_cast<float*>(g), opt_->begin(),
                               opt_->end());
  const GradientCheck check = check_gradients(loss, g, opt_->begin(), opt_->end(), comm,
                                              zero_ != nullptr);
  st.grad_norm = check.norm / loss_scale;
  st.lr = schedule_.at(step);
  st.finite = check.finite;
  st.loss_scale = loss_scale;
  // fp16: the loss scaler sees the reduced flag, so every rank skips alike.
  const bool apply = mp_ ? mp_->decide(check.finite) : check.finite;
  st.overflow_skipped = mp_ && mp_->last_was_overflow();
  if (apply) {
    if (before_update_) {
      telemetry::TraceScope wait(telemetry::global_tracer(), "wait checkpoint snapshot", "io");
      st.update_wait_s = before_update_();
    }
    telemetry::TraceScope trace(telemetry::global_tracer(), "optimizer", "compute");
    if (zero_) zero_->before_update();
    opt_->step(model_.params().flat.data<float>(), g, st.lr,
               clip_coefficient(st.grad_norm, clip_) / loss_scale);
    if (zero_) zero_->after_update();  // gathers the updated parameters (async)
  }
  st.optimizer_s = now_s() - t2;
  return st;
}

}  // namespace meshtrain
