#include "meshtrain/parallel/zero.h"

#include <algorithm>

#include <fmt/format.h>

#include "meshtrain/core/error.h"
#include "meshtrain/telemetry/trace_writer.h"

namespace meshtrain::parallel {

namespace {
std::vector<ElemSpan> units_of(const ParamLayout& layout) {
  std::vector<ElemSpan> out;
  for (const ParamUnit& u : layout.units) out.push_back({u.begin, u.end});
  return out;
}
}  // namespace

Zero::Zero(comm::Communicator comm, std::shared_ptr<const ModelSpec> spec, ZeroOptions opts)
    : comm_(std::move(comm)), spec_(std::move(spec)), opts_(opts) {
  MT_CHECK(spec_, "ZeRO needs a model spec");
  MT_CHECK(comm_.valid(), "ZeRO needs a valid communicator");
  MT_CHECK(opts_.stage >= 1 && opts_.stage <= 3, "zero.stage must be 1, 2 or 3 here, got {}",
           opts_.stage);
  MT_CHECK(opts_.persist_threshold >= 0, "zero.persist_threshold must be >= 0, got {}",
           opts_.persist_threshold);
  layout_ = ZeroLayout(spec_->num_params(), comm_.size(), comm_.rank());
}

// The model is usually destroyed first (it lives on buffers this object
// owns): nothing here touches it; in-flight collectives are waited for by the
// members before the buffers go.
Zero::~Zero() = default;

void Zero::detach() {
  if (!model_) return;
  model_->set_param_hook(nullptr);
  model_->set_grad_ready_hook(nullptr);
  model_ = nullptr;
}

bool starts_from_own_range(const ZeroOptions& opts) {
  return opts.own_range_init && (opts.stage == 3 || is_mixed(opts.precision));
}

std::unique_ptr<Model> Zero::make_model() {
  MT_CHECK(!params_, "make_model() called twice");
  const ParamLayout& lay = spec_->layout();
  const int64_t P = lay.numel;
  const bool mixed = is_mixed(opts_.precision);
  own_start_ = starts_from_own_range(opts_);
  std::unique_ptr<Model> model;
  // Mixed precision keeps only the own f32 range resident at every stage.
  if (mixed || opts_.stage == 3) param_res_ = std::make_unique<ReservedBuffer>(P);
  if (opts_.stage == 1) {
    dp_ = std::make_unique<DataParallel>(comm_, P, opts_.dp, &lay);
    model = spec_->build({mixed ? param_res_->tensor() : Tensor(), dp_->gradient_buffer(), true});
  } else {
    MT_CHECK(!opts_.dp.compression.compressing(), "comm.compression.type = \"{}\" with zero.stage = {}: "
             "stages 2 and 3 reduce each piece of the gradients to its owner, which needs a wire "
             "format whose messages add up (f32, bf16), and a {} message does not; use zero.stage "
             "1 (the same optimizer-state saving, gradients allreduced) or no compression",
             opts_.dp.compression.type, opts_.stage, opts_.dp.compression.type);
    grad_res_ = std::make_unique<ReservedBuffer>(P);  // zero until backward writes
    if (!param_res_) param_tensor_ = Tensor::zeros({P}, DType::F32, MemCategory::Parameters);
    model = spec_->build({param_res_ ? param_res_->tensor() : param_tensor_, grad_res_->tensor(), false});
  }
  float* params = model->param_buffer().data<float>();
  const std::vector<ElemSpan> units = units_of(lay);
  // Stage 3 runs for memory: its largest transient gradient (the bracketed
  // unit's, GPT's tied embedding) is reduced before backward writes a layer.
  if (grad_res_)
    grads_ = std::make_unique<ZeroGradients>(comm_, layout_, units, *grad_res_,
                                             lay.bracketed_grad_unit,
                                             /*isolate_bracketed=*/opts_.stage == 3);
  // Stages 2-3 reduce in the same wire format as stage 1's buckets.
  if (grads_) grads_->set_wire_dtype(opts_.dp.grad_dtype);
  HalfCopy half;
  if (mixed) {
    half_res_ = std::make_unique<ReservedBuffer>((P + 1) / 2);
    const DType dt = opts_.precision == Precision::BF16 ? DType::BF16 : DType::F16;
    model->set_precision(opts_.precision);
    model->use_external_half_copy(half_res_->half_tensor(P, dt));
    half = {reinterpret_cast<uint16_t*>(half_res_->data()), half_res_.get(), dt,
            lay.f32_read_ranges()};
  }
  params_ = std::make_unique<ZeroParameters>(comm_, layout_, units, lay.order,
                                             lay.bracketed_grad_unit, params,
                                             param_res_.get(), opts_.stage == 3,
                                             opts_.persist_threshold, mixed ? &half : nullptr,
                                             own_start_);
  return model;
}

void Zero::init_weights(Model& model, uint64_t seed) {
  if (!own_start_) return model.init_weights(seed);
  // Only the own range of the reserved buffer is written: the foreign pages
  // are never touched, so they take no memory; start() gathers them.
  MT_CHECK(spec_->initial_weights(seed, own(), model.param_buffer().data<float>()),
           "model family '{}' cannot initialize a range (own_range_init)", spec_->family());
}

std::optional<ElemSpan> Zero::setup_range() const {
  return own_start_ ? std::optional<ElemSpan>(own()) : std::nullopt;
}

void Zero::before_resume() {
  // With an own-range start each rank wrote its range with what rank 0's
  // would hold (the same initial weights, or the same file): nothing to broadcast.
  if (!own_start_) broadcast_parameters();
  shard();
}

void Zero::attach(Model& model) {
  MT_CHECK(params_, "make_model() before attach()");
  MT_CHECK(&model.spec().layout() == &spec_->layout() || model.layout().numel == spec_->num_params(),
           "attach() the model make_model() built");
  MT_CHECK(model.precision() == opts_.precision &&
               (!is_mixed(opts_.precision) || model.external_half_copy()),
           "ZeRO was set up for precision {} but the model computes in {}{}: pass the precision "
           "in ZeroOptions before make_model()", precision_name(opts_.precision),
           precision_name(model.precision()),
           is_mixed(model.precision()) && !model.external_half_copy() ? " with its own 16-bit copy"
                                                                      : "");
  model_ = &model;
  if (dp_) dp_->attach(model);
  if (grads_) model.set_grad_ready_hook([this](int64_t b, int64_t e) { grads_->on_ready(b, e); });
  const int bracketed = spec_->layout().bracketed_grad_unit;
  model.set_param_hook([this, bracketed](ParamEvent ev, int unit, bool backward) {
    // nn/model.h: the bracketed unit's gradient is written between GradBegin
    // and GradEnd (GPT: the tied embedding, after its backward Done); every
    // other unit's inside its backward Need/Done. The parameter side ignores
    // the Grad events.
    if (grads_ && ev == ParamEvent::GradBegin) grads_->on_grad_begin(unit);
    if (grads_ && ev == ParamEvent::Need && backward && unit != bracketed)
      grads_->on_grad_begin(unit);
    params_->on_event(ev, unit, backward);
    if (grads_ && ev == ParamEvent::GradEnd) grads_->on_grad_end(unit);
  });
}

void Zero::broadcast_parameters() {
  MT_CHECK(model_, "attach() a model before broadcast_parameters()");
  comm_.broadcast(model_->param_buffer(), /*root=*/0).wait();
}

void Zero::shard() {
  MT_CHECK(model_, "attach() a model before shard()");
  params_->shard();
}

void Zero::start() {
  MT_CHECK(model_, "attach() a model before start()");
  params_->start();
}

void Zero::zero_grad() {
  if (grads_) {
    grads_->zero();
  } else {
    model_->zero_grad();
  }
}

void Zero::set_parameter_pass(const std::vector<ParamUse>& order) {
  if (params_ && params_->sharded()) params_->set_pass(order);
}

void Zero::set_backward_span(ElemSpan span) {
  if (grads_) grads_->set_backward_span(span);
}

void Zero::begin_backward(bool last) {
  MT_CHECK(model_, "attach() a model before begin_backward()");
  if (dp_) {
    dp_->begin_backward(last);
    return;
  }
  grads_->begin_backward();
  if (last) {
    backward_start_ = steady_now_s();
    last_watched_ = grads_->watched();
    last_reductions_ = grads_->reductions();
  }
}

double Zero::end_backward(bool last) {
  if (dp_) {
    const double waited = dp_->end_backward(last);
    if (last) timing_ = dp_->timing();
    return waited;
  }
  telemetry::TraceScope wait(telemetry::global_tracer(), "wait gradients", "comm");
  const double t0 = steady_now_s();
  grads_->end_backward();
  const double waited = steady_now_s() - t0;
  if (last) {
    timing_ = {};
    timing_.backward_s = t0 - backward_start_;
    timing_.exposed_s = waited;
    timing_.buckets = static_cast<int>(grads_->reductions() - last_reductions_);
    timing_.first_launch_s = grads_->watched() > last_watched_
                                 ? grads_->launched_at(last_watched_) - backward_start_
                                 : 0;
    timing_.total_s = grads_->busy_seconds();
  }
  return waited;
}

float* Zero::gradients() {
  if (dp_) return dp_->gradients();
  return grads_->shard() - own().begin;
}

void Zero::before_update() { params_->before_update(); }
void Zero::after_update() { params_->after_update(); }

void Zero::gather_full_parameters() {
  params_->gather_to_root();
  params_->set_enabled(false);
}

void Zero::resume_hooks() {
  params_->set_enabled(true);
  params_->release_transient();
}

std::string Zero::describe() const {
  return fmt::format("ZeRO stage {}: {} ranks over {}; rank {} holds parameters [{}, {}) of {} for "
                     "its optimizer state{}{}", opts_.stage, comm_.size(), comm_.transport(),
                     comm_.rank(), own().begin, own().end, spec_->num_params(),
                     opts_.stage >= 2 ? " and gradients" : "",
                     opts_.stage == 3 ? fmt::format(" and parameters ({} elements in units under "
                                                    "zero.persist_threshold = {} stay resident)",
                                                    persistent_elements(), opts_.persist_threshold)
                                      : "");
}

int64_t Zero::persistent_elements() const {
  return params_ && params_->sharded() ? params_->persistent_elements() : 0;
}

}  // namespace meshtrain::parallel
