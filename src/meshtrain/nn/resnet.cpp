#include "meshtrain/nn/resnet.h"

#include <limits>
#include <utility>

#include "meshtrain/core/error.h"

namespace meshtrain {

ResNet::ResNet(std::shared_ptr<const ResNetSpec> spec, ModelBuffers buffers) : spec_(std::move(spec)) {
  MT_CHECK(!buffers.frozen, "resnet: a frozen model (adapters) is not supported");
  buffers = adopt_buffers(std::move(buffers), spec_->layout().numel);
  params_ = buffers.params;
  grads_ = buffers.grads;
  k_ = &kernels_for(params_.device());
  stream_ = default_stream(params_.device());
}

void ResNet::init_weights(uint64_t seed) {
  fill_params_from_host(params_, [&](float* p) {
    spec_->initial_weights(seed, {0, spec_->layout().numel}, p);
  });
}

void ResNet::set_recompute(const Recompute& recompute) {
  MT_CHECK(!recompute.recomputes_attention(), "resnet: recompute = selective re-runs attention "
           "cores, which a resnet has none of; use full or every:K (blocks re-run in backward)");
  ModelBase::set_recompute(recompute);
}

void ResNet::set_replica_group(std::shared_ptr<TensorParallelGroup> group) { replicas_ = std::move(group); }

void ResNet::release_activations() {
  acts_ = Tensor();
  work_ = Tensor();
  B_ = 0;
  have_targets_ = false;
}

const float* ResNet::logits() const {
  MT_CHECK(acts_.defined(), "resnet: logits before a forward");
  return A(at_.logits);
}

void ResNet::conv_bn_forward(int i, const float* inp, bool relu) {
  const ConvBN& c = plan().convs[static_cast<size_t>(i)];
  const ResNetActivations::Conv& a = at_.convs[static_cast<size_t>(i)];
  Conv2dShape s = c.shape;
  s.N = B_;
  const int64_t C = s.OC, HW = s.OH() * s.OW();
  if (half_.mixed()) {
    uint16_t* inp_h = half_scratch();
    k_->to_half(stream_, half_.format(), inp, inp_h, s.in_numel());
    k_->conv2d_forward_half(stream_, half_.format(), A(a.out), inp_h, half_.at(c.weight), nullptr, s);
  } else {
    k_->conv2d_forward(stream_, A(a.out), inp, P(c.weight), nullptr, s);
  }
  const ResNetConfig& cfg = spec_->config();
  if (replaying_) {
    // Backward re-runs a recomputed block: the forward's batch statistics
    // (saved), no second update of the running ones, no allreduce.
    k_->batchnorm_normalize(stream_, A(a.bn), A(a.out), A(a.mean), A(a.rstd), P(c.gamma), P(c.beta),
                            B_, C, HW);
  } else if (training_) {
    // [sum (C), sum of squares (C), count]: summed over the replicas first
    // under synchronized batch norm.
    double* sums = reinterpret_cast<double*>(work_.data<float>() + 3 * at_.largest);
    k_->batchnorm_partial_sums(stream_, sums, sums + C, A(a.out), B_, C, HW);
    sums[2 * C] = static_cast<double>(B_ * HW);
    if (replicas_ && replicas_->size() > 1) replicas_->allreduce_sum_f64(sums, 2 * C + 1);
    const auto count = static_cast<int64_t>(sums[2 * C]);
    MT_CHECK(count > 1, "resnet: batch norm {} sees one value per channel (batch {} of {}x{} "
             "maps); training needs more (a larger batch)", c.name, B_, s.OH(), s.OW());
    k_->batchnorm_stats(stream_, A(a.mean), A(a.rstd), sums, sums + C, count, C, cfg.bn_eps);
    k_->batchnorm_normalize(stream_, A(a.bn), A(a.out), A(a.mean), A(a.rstd), P(c.gamma),
                            P(c.beta), B_, C, HW);
    k_->batchnorm_update_running(stream_, P(c.running_mean), P(c.running_var), sums, sums + C,
                                 count, C, cfg.bn_momentum);
  } else {
    k_->batchnorm_forward_inference(stream_, A(a.bn), A(a.out), P(c.running_mean),
                                    P(c.running_var), P(c.gamma), P(c.beta), B_, C, HW, cfg.bn_eps);
  }
  if (relu) k_->relu_forward(stream_, A(a.bn), A(a.bn), B_ * C * HW);
}

void ResNet::conv_bn_backward(int i, float* g, const float* inp, float* dinp) {
  const ConvBN& c = plan().convs[static_cast<size_t>(i)];
  const ResNetActivations::Conv& a = at_.convs[static_cast<size_t>(i)];
  Conv2dShape s = c.shape;
  s.N = B_;
  const int64_t C = s.OC, HW = s.OH() * s.OW();
  double* sums = reinterpret_cast<double*>(work_.data<float>() + 3 * at_.largest);
  k_->batchnorm_backward_partial_sums(stream_, sums, sums + C, g, A(a.out), A(a.mean), A(a.rstd),
                                      B_, C, HW);
  // This rank's own sums into the scale and shift gradients (the replicas'
  // gradients are averaged after the step, as for every parameter).
  k_->batchnorm_backward_params(stream_, G(c.gamma), G(c.beta), sums, sums + C, C);
  sums[2 * C] = static_cast<double>(B_ * HW);
  if (replicas_ && replicas_->size() > 1) replicas_->allreduce_sum_f64(sums, 2 * C + 1);
  k_->batchnorm_backward_input(stream_, g, g, A(a.out), A(a.mean), A(a.rstd), P(c.gamma), sums,
                               sums + C, static_cast<int64_t>(sums[2 * C]), B_, C, HW);
  if (half_.mixed()) {
    // Both products read the output gradient rounded once; the input is
    // rounded again, to the bits the forward computed with.
    const HalfFormat fmt = half_.format();
    uint16_t* g_h = half_scratch();
    uint16_t* inp_h = g_h + at_.largest;
    k_->to_half(stream_, fmt, g, g_h, s.out_numel());
    k_->to_half(stream_, fmt, inp, inp_h, s.in_numel());
    k_->conv2d_backward_weights_half(stream_, fmt, G(c.weight), nullptr, g_h, inp_h, s);
    if (dinp) k_->conv2d_backward_data_half(stream_, fmt, dinp, g_h, half_.at(c.weight), s);
    return;
  }
  k_->conv2d_backward_weights(stream_, G(c.weight), nullptr, g, inp, s);
  if (dinp) k_->conv2d_backward_data(stream_, dinp, g, P(c.weight), s);
}

const float* ResNet::block_forward(const ResBlock& blk, const float* inp) {
  const float* x = inp;
  for (size_t j = 0; j < blk.convs.size(); ++j) {
    conv_bn_forward(blk.convs[j], x, j + 1 < blk.convs.size());  // the last ReLU follows the sum
    x = A(at_.convs[static_cast<size_t>(blk.convs[j])].bn);
  }
  const float* shortcut = inp;
  if (blk.shortcut >= 0) {
    conv_bn_forward(blk.shortcut, inp, false);
    shortcut = A(at_.convs[static_cast<size_t>(blk.shortcut)].bn);
  }
  float* out = A(at_.convs[static_cast<size_t>(blk.convs.back())].bn);
  const int64_t n = B_ * plan().convs[static_cast<size_t>(blk.convs.back())].shape.out_numel();
  k_->add_inplace(stream_, out, shortcut, n);
  k_->relu_forward(stream_, out, out, n);
  return out;
}

// Scratch of the backward: g (the gradient being carried), dinp (the
// block's input gradient) and tmp, each of the largest activation's size.
void ResNet::block_backward(const ResBlock& blk, const float* inp, float* g, float* dinp) {
  float* tmp = work_.data<float>() + 2 * at_.largest;
  const int last = blk.convs.back();
  const int64_t n_out = B_ * plan().convs[static_cast<size_t>(last)].shape.out_numel();
  const int64_t n_in = B_ * plan().convs[static_cast<size_t>(blk.convs.front())].shape.in_numel();
  k_->relu_backward(stream_, g, g, A(at_.convs[static_cast<size_t>(last)].bn), n_out);
  // The shortcut first, from a copy: the main path overwrites g.
  if (blk.shortcut >= 0) {
    k_->copy(stream_, tmp, g, n_out);
    conv_bn_backward(blk.shortcut, tmp, inp, dinp);
  } else {
    k_->copy(stream_, dinp, g, n_in);
  }
  float* cur = g;
  for (int j = static_cast<int>(blk.convs.size()) - 1; j >= 0; --j) {
    const int i = blk.convs[static_cast<size_t>(j)];
    float* next = cur == g ? tmp : g;
    if (j == 0) {
      conv_bn_backward(i, cur, inp, next);
      k_->add_inplace(stream_, dinp, next, n_in);
      break;
    }
    const int prev = blk.convs[static_cast<size_t>(j - 1)];
    conv_bn_backward(i, cur, A(at_.convs[static_cast<size_t>(prev)].bn), next);
    const int64_t n_prev = B_ * plan().convs[static_cast<size_t>(prev)].shape.out_numel();
    k_->relu_backward(stream_, next, next, A(at_.convs[static_cast<size_t>(prev)].bn), n_prev);
    cur = next;
  }
}

const float* ResNet::block_input(size_t b) const {
  if (b > 0) return A(at_.convs[static_cast<size_t>(plan().blocks[b - 1].convs.back())].bn);
  return plan().stem_pool.KH > 0 ? A(at_.pool) : A(at_.convs[0].bn);
}

float ResNet::forward(const MicroBatch& batch) {
  const ResNetPlan& p = plan();
  MT_CHECK(batch.features != nullptr && batch.inputs == nullptr, "resnet: a micro-batch of images "
           "(MicroBatch::features), not token ids");
  MT_CHECK(batch.B >= 1 && batch.T == 1, "resnet: micro-batch of {} images with {} targets each "
           "(expected at least 1 image, 1 label each)", batch.B, batch.T);
  if (batch.B != B_ || !acts_.defined()) {
    release_activations();
    B_ = batch.B;
    at_ = ResNetActivations::make(p, B_, recompute_);
    acts_ = Tensor::zeros({at_.floats}, DType::F32, MemCategory::Activations, k_->device);
    work_ = Tensor::zeros({at_.workspace_floats(half_.mixed())}, DType::F32, MemCategory::Workspace,
                          k_->device);
  }
  const int64_t image = p.convs[0].shape.in_numel();
  runtime_for(k_->device).copy(A(at_.input), k_->device, batch.features, Device::cpu(),
                               sizeof(float) * static_cast<size_t>(B_ * image), stream_);
  use_params(ParamEvent::Need, 0, false);
  half_.refresh(p.layout, 0, params_.data<float>(), *k_);
  conv_bn_forward(0, A(at_.input), true);
  if (p.stem_pool.KH > 0) {
    Pool2dShape s = p.stem_pool;
    s.N = B_;
    k_->max_pool2d_forward(stream_, A(at_.pool), reinterpret_cast<int32_t*>(A(at_.argmax)),
                           A(at_.convs[0].bn), s);
  }
  use_params(ParamEvent::Done, 0, false);
  const float* x = block_input(0);
  for (const ResBlock& blk : p.blocks) {
    use_params(ParamEvent::Need, blk.unit, false);
    half_.refresh(p.layout, blk.unit, params_.data<float>(), *k_);
    x = block_forward(blk, x);
    use_params(ParamEvent::Done, blk.unit, false);
  }
  use_params(ParamEvent::Need, p.head_unit, false);
  k_->global_avg_pool_forward(stream_, A(at_.pooled), x, B_, p.features, p.pooled_hw);
  k_->matmul_forward(stream_, A(at_.logits), A(at_.pooled), P(p.fc_weight), P(p.fc_bias), B_,
                     p.features, p.classes, false);
  use_params(ParamEvent::Done, p.head_unit, false);
  forward_training_ = training_;
  metrics_.clear();
  have_targets_ = batch.targets != nullptr;
  if (!have_targets_) return std::numeric_limits<float>::quiet_NaN();
  const int32_t* t = stage_ids(1, batch.targets, B_);
  for (int i = 0; i < B_; ++i)
    MT_CHECK(batch.targets[i] < p.classes, "resnet: label {} of image {} is outside the {} classes",
             batch.targets[i], i, p.classes);
  counted_ = k_->softmax_cross_entropy_forward(stream_, A(at_.losses), A(at_.logits), t, B_,
                                               p.classes, p.classes);
  const auto n = static_cast<double>(counted_);
  metrics_.push_back({"top1", static_cast<double>(k_->topk_correct(stream_, A(at_.logits), t, B_, p.classes, p.classes, 1)), n});
  if (p.classes > 5)
    metrics_.push_back({"top5", static_cast<double>(k_->topk_correct(stream_, A(at_.logits), t, B_, p.classes, p.classes, 5)), n});
  return counted_ > 0 ? static_cast<float>(sum_floats(A(at_.losses), B_) / n) : 0.f;
}

void ResNet::backward(float loss_scale) {
  const ResNetPlan& p = plan();
  MT_CHECK(have_targets_, "resnet: backward without a forward with labels");
  MT_CHECK(forward_training_, "resnet: backward after an evaluation-mode forward");
  if (counted_ == 0) return;
  float* g = work_.data<float>();
  float* dinp = g + at_.largest;
  float* tmp = g + 2 * at_.largest;
  // The classifier: the loss gradient in tmp (logits stay for metrics()).
  use_params(ParamEvent::Need, p.head_unit, true);
  k_->copy(stream_, tmp, A(at_.logits), B_ * p.classes);
  k_->softmax_cross_entropy_backward(stream_, tmp, staged_ids(1), loss_scale / static_cast<float>(counted_),
                                     B_, p.classes, p.classes);
  k_->matmul_backward(stream_, dinp, G(p.fc_weight), G(p.fc_bias), tmp, A(at_.pooled), P(p.fc_weight),
                      B_, p.features, p.classes, false);
  const ParamUnit& head = p.layout.units[static_cast<size_t>(p.head_unit)];
  report_ready(head.begin, head.end);
  use_params(ParamEvent::Done, p.head_unit, true);
  k_->global_avg_pool_backward(stream_, g, dinp, B_, p.features, p.pooled_hw);
  for (size_t b = p.blocks.size(); b-- > 0;) {
    const ResBlock& blk = p.blocks[b];
    use_params(ParamEvent::Need, blk.unit, true);
    if (recompute_.recomputes_block(static_cast<int>(b))) {
      // Its inner outputs were overwritten by later blocks: the same
      // computation again, bit for bit.
      replaying_ = true;
      block_forward(blk, block_input(b));
      replaying_ = false;
    }
    block_backward(blk, block_input(b), g, dinp);
    const ParamUnit& u = p.layout.units[static_cast<size_t>(blk.unit)];
    report_ready(u.begin, u.end);
    use_params(ParamEvent::Done, blk.unit, true);
    std::swap(g, dinp);
  }
  // The stem: g is d(its output).
  use_params(ParamEvent::Need, 0, true);
  if (p.stem_pool.KH > 0) {
    Pool2dShape s = p.stem_pool;
    s.N = B_;
    k_->max_pool2d_backward(stream_, dinp, g, reinterpret_cast<const int32_t*>(A(at_.argmax)), s);
    std::swap(g, dinp);
  }
  k_->relu_backward(stream_, g, g, A(at_.convs[0].bn), B_ * p.convs[0].shape.out_numel());
  conv_bn_backward(0, g, A(at_.input), nullptr);
  report_ready(p.layout.units[0].begin, p.layout.units[0].end);
  use_params(ParamEvent::Done, 0, true);
}

}  // namespace meshtrain
