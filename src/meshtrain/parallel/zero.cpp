#include "meshtrain/parallel/zero.h"

#include <algorithm>

#include "meshtrain/core/error.h"

namespace meshtrain::parallel {

namespace {
std::vector<ElemSpan> units_of(const GPTParams& p) {
  std::vector<ElemSpan> out;
  for (int u = 0; u < p.num_units(); ++u) {
    auto [b, e] = p.unit_range(u);
    out.push_back({b, e});
  }
  return out;
}
}  // namespace

Zero::Zero(comm::Communicator comm, const GPTConfig& cfg, ZeroOptions opts)
    : comm_(std::move(comm)), cfg_(cfg), opts_(opts) {
  MT_CHECK(comm_.valid(), "ZeRO needs a valid communicator");
  MT_CHECK(opts_.stage >= 1 && opts_.stage <= 3, "zero.stage must be 1, 2 or 3 here, got {}",
           opts_.stage);
  MT_CHECK(opts_.persist_threshold >= 0, "zero.persist_threshold must be >= 0, got {}",
           opts_.persist_threshold);
  layout_ = ZeroLayout(cfg_.num_params(), comm_.size(), comm_.rank());
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

namespace {
// The parameters GPT reads in f32 under mixed precision (nn/gpt.h): all but
// the GEMM weights (wte and each layer's four matrices), as sorted spans.
std::vector<ElemSpan> f32_read_spans(const GPTParams& p) {
  std::vector<ElemSpan> out;
  auto add = [&](const Tensor& t) {
    const int64_t b = t.offset() - p.flat.offset();
    if (!out.empty() && out.back().end == b) out.back().end = b + t.numel();
    else out.push_back({b, b + t.numel()});
  };
  add(p.wpe);
  for (const GPTLayerParams& l : p.layers)
    for (const Tensor* t : {&l.ln1w, &l.ln1b, &l.qkvb, &l.attprojb, &l.ln2w, &l.ln2b, &l.fcb,
                            &l.fcprojb})
      add(*t);
  add(p.lnfw);
  add(p.lnfb);
  std::sort(out.begin(), out.end(), [](ElemSpan a, ElemSpan b) { return a.begin < b.begin; });
  return out;
}
}  // namespace

std::unique_ptr<GPT> Zero::make_model() {
  MT_CHECK(!params_, "make_model() called twice");
  const int64_t P = cfg_.num_params();
  const bool mixed = is_mixed(opts_.precision);
  std::unique_ptr<GPT> model;
  float* params = nullptr;
  // Mixed precision keeps only the own f32 range resident at every stage.
  if (mixed || opts_.stage == 3) param_res_ = std::make_unique<ReservedBuffer>(P);
  if (opts_.stage == 1) {
    dp_ = std::make_unique<DataParallel>(comm_, P, opts_.dp);
    model = mixed ? std::make_unique<GPT>(cfg_, param_res_->tensor(), dp_->gradient_buffer(), true)
                  : std::make_unique<GPT>(cfg_, dp_->gradient_buffer());
  } else {
    grad_res_ = std::make_unique<ReservedBuffer>(P);  // zero until backward writes
    if (!param_res_) {
      param_tensor_ = Tensor::zeros({P}, DType::F32, MemCategory::Parameters);
      model = std::make_unique<GPT>(cfg_, param_tensor_, grad_res_->tensor(), false);
    } else {
      model = std::make_unique<GPT>(cfg_, param_res_->tensor(), grad_res_->tensor(), false);
    }
  }
  params = model->params().flat.data<float>();
  const std::vector<ElemSpan> units = units_of(model->params());
  // Stage 3 runs for memory: its largest transient gradient (the tied
  // embedding's) is reduced before backward gathers and writes a layer.
  if (grad_res_)
    grads_ = std::make_unique<ZeroGradients>(comm_, layout_, units, *grad_res_,
                                             /*isolate_embedding=*/opts_.stage == 3);
  // Stages 2-3 reduce in the same wire format as stage 1's buckets.
  if (grads_) grads_->set_wire_dtype(opts_.dp.grad_dtype);
  HalfCopy half;
  if (mixed) {
    half_res_ = std::make_unique<ReservedBuffer>((P + 1) / 2);
    const DType dt = opts_.precision == Precision::BF16 ? DType::BF16 : DType::F16;
    model->set_precision(opts_.precision);
    model->use_external_half_copy(half_res_->half_tensor(P, dt));
    half = {reinterpret_cast<uint16_t*>(half_res_->data()), half_res_.get(), dt,
            f32_read_spans(model->params())};
  }
  params_ = std::make_unique<ZeroParameters>(comm_, layout_, units, params, param_res_.get(),
                                             opts_.stage == 3, opts_.persist_threshold,
                                             mixed ? &half : nullptr);
  return model;
}

void Zero::attach(GPT& model) {
  MT_CHECK(params_, "make_model() before attach()");
  MT_CHECK(model.config().num_params() == cfg_.num_params(),
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
  model.set_param_hook([this](GPT::ParamEvent ev, int unit, bool backward) {
    // nn/gpt.h: the tied embedding's gradient is written between GradBegin 0
    // and GradEnd 0, after its backward Done; every other unit's inside its
    // backward Need/Done. The parameter side ignores the Grad events.
    if (grads_ && ev == GPT::ParamEvent::GradBegin) grads_->on_grad_begin(unit);
    if (grads_ && ev == GPT::ParamEvent::Need && backward && unit != 0)
      grads_->on_grad_begin(unit);
    params_->on_event(ev, unit, backward);
    if (grads_ && ev == GPT::ParamEvent::GradEnd) grads_->on_grad_end(unit);
  });
}

void Zero::broadcast_parameters() {
  MT_CHECK(model_, "attach() a model before broadcast_parameters()");
  comm_.broadcast(model_->params().flat, /*root=*/0).wait();
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

void Zero::begin_backward(bool last) {
  if (dp_) {
    dp_->begin_backward(last);
    return;
  }
  grads_->begin_backward();
  if (last) backward_start_ = steady_now_s();
}

void Zero::end_backward(bool last) {
  if (dp_) {
    if (last) {
      dp_->finish_gradients();
      timing_ = dp_->timing();
    }
    return;
  }
  const double t0 = steady_now_s();
  const double waited = grads_->end_backward();
  if (last) {
    timing_ = {};
    timing_.backward_s = t0 - backward_start_;
    timing_.exposed_s = waited;
    timing_.buckets = static_cast<int>(grads_->reductions());
  }
}

const float* Zero::gradients() const {
  if (dp_) return model_->grads().flat.data<float>();
  return grads_->shard() - own().begin;
}

void Zero::before_update() { params_->before_update(); }
void Zero::after_update() { params_->after_update(); }

void Zero::gather_full_parameters() {
  params_->gather_all();
  params_->set_enabled(false);
}

void Zero::resume_hooks() {
  params_->set_enabled(true);
  params_->release_transient();
}

int64_t Zero::persistent_elements() const {
  return params_ && params_->sharded() ? params_->persistent_elements() : 0;
}

}  // namespace meshtrain::parallel
