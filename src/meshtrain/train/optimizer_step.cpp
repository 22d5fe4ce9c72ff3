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

OptimizerStep::OptimizerStep(GPT& model, AdamWConfig adam, LrSchedule schedule, float clip,
                             parallel::DataParallel* dp)
    : model_(model), schedule_(schedule), clip_(clip), dp_(dp) {
  opt_ = std::make_unique<AdamW>(0, model.config().num_params(),
                                 gpt_param_segments(model.params()), adam);
}

StepStats OptimizerStep::run(const std::vector<MicroBatch>& micro, int64_t step) {
  MT_CHECK(!micro.empty(), "a step needs at least one micro-batch");
  StepStats st;
  model_.zero_grad();
  double loss_sum = 0.0;
  const float scale = 1.0f / static_cast<float>(micro.size());
  for (size_t i = 0; i < micro.size(); ++i) {
    const MicroBatch& mb = micro[i];
    double t0 = now_s();
    loss_sum += model_.forward(mb.inputs, mb.targets, mb.B, mb.T);
    double t1 = now_s();
    // Buckets are reduced during the last micro-batch's backward only.
    if (dp_) dp_->begin_backward(i + 1 == micro.size());
    model_.backward(scale);
    st.forward_s += t1 - t0;
    st.backward_s += now_s() - t1;
  }
  double loss = loss_sum / micro.size();
  if (dp_) {
    telemetry::TraceScope wait(telemetry::global_tracer(), "wait gradients", "comm");
    dp_->finish_gradients();  // from here on every rank holds the averaged gradient
    st.comm = dp_->timing();
    loss = dp_->average(loss);
  }
  double t2 = now_s();  // optimizer time excludes the exposed communication
  st.loss = static_cast<float>(loss);
  const Tensor& g = model_.grads().flat;
  // After the reduction the local norm is the global one.
  const double sq = cpu::sum_squares(g.data<float>(), g.numel());
  st.grad_norm = std::sqrt(sq);
  st.lr = schedule_.at(step);
  st.finite = std::isfinite(loss) && std::isfinite(sq);
  // Every rank must skip (or not) together, so the decision is reduced too.
  if (dp_) st.finite = dp_->all(st.finite);
  if (st.finite) {
    telemetry::TraceScope trace(telemetry::global_tracer(), "optimizer", "compute");
    opt_->step(model_.params().flat.data<float>(), g.data<float>(), st.lr,
               clip_coefficient(st.grad_norm, clip_));
  }
  st.optimizer_s = now_s() - t2;
  return st;
}

}  // namespace meshtrain
