// ResNet's Model (nn/model.h) on the kernel table: forward and backward of
// a micro-batch of images (MicroBatch::features, B x C x H x W; targets (B)
// class labels), softmax cross-entropy over the classes, top-1/top-5 as
// measures. Batch norm uses the batch's statistics in training mode (and
// updates the running ones, ParamInfo::trained = false entries of the flat
// buffer) and the running ones in evaluation mode. With a replica group
// (set_replica_group: the data-parallel ranks) the batch statistics and the
// backward's two per-channel sums are summed over it first: synchronized
// batch norm, so b images on each of N ranks normalize as N b on one.
// Parameter units: the stem, each residual block, the classifier. Under
// mixed precision (set_precision) the convolutions take 16-bit operands
// (weights from the 16-bit copy, inputs and output gradients rounded at use)
// and accumulate in f32; batch norm, the residual sums, pooling and the
// classifier stay f32, as do the stored activations.
#pragma once
#include <memory>
#include <vector>

#include "meshtrain/nn/model_base.h"
#include "meshtrain/nn/resnet_activations.h"
#include "meshtrain/nn/resnet_spec.h"

namespace meshtrain {

class ResNet final : public ModelBase {
 public:
  ResNet(std::shared_ptr<const ResNetSpec> spec, ModelBuffers buffers);

  const ModelSpec& spec() const override { return *spec_; }
  const Tensor& param_buffer() const override { return params_; }
  const Tensor& grad_buffer() const override { return grads_; }
  void init_weights(uint64_t seed) override;
  float forward(const MicroBatch& batch) override;
  void backward(float loss_scale) override;
  std::vector<MetricSum> metrics() const override { return metrics_; }
  void set_training(bool training) override { training_ = training; }
  bool training() const override { return training_; }
  void set_replica_group(std::shared_ptr<TensorParallelGroup> group) override;
  const float* logits() const override;
  int logits_stride() const override { return static_cast<int>(plan().classes); }
  void release_activations() override;
  // full / every:K: the chosen residual blocks keep only their outputs and
  // are re-run in backward (the same bits); selective is refused.
  void set_recompute(const Recompute& recompute) override;

 private:
  const ResNetPlan& plan() const { return spec_->plan(); }
  float* P(int64_t offset) const { return params_.data<float>() + offset; }
  float* G(int64_t offset) const { return grads_.data<float>() + offset; }
  float* A(int64_t offset) const { return acts_.data<float>() + offset; }
  // Mixed precision: two 16-bit operands of the largest activation's size.
  uint16_t* half_scratch() const {
    return reinterpret_cast<uint16_t*>(work_.data<float>() + at_.half_scratch());
  }
  // One convolution and its batch norm (and the ReLU when `relu`) on `inp`.
  void conv_bn_forward(int i, const float* inp, bool relu);
  // From d(its batch norm's output) in `g` (overwritten): accumulates the
  // parameter gradients and writes d(inp) into `dinp`.
  void conv_bn_backward(int i, float* g, const float* inp, float* dinp);
  // A residual block's forward from `inp`; returns its output.
  const float* block_forward(const ResBlock& blk, const float* inp);
  // From d(block output) in `g` (overwritten) to d(inp) in `dinp`.
  void block_backward(const ResBlock& blk, const float* inp, float* g, float* dinp);
  const float* block_input(size_t b) const;
  void switch_slot(int, int) override {}

  std::shared_ptr<const ResNetSpec> spec_;
  Tensor params_, grads_;
  Tensor acts_, work_;  // activations and the backward's scratch, per micro-batch size
  ResNetActivations at_;
  std::vector<int32_t> targets_;
  std::vector<MetricSum> metrics_;
  std::shared_ptr<TensorParallelGroup> replicas_;
  int64_t B_ = 0, counted_ = 0;
  bool training_ = true;
  bool forward_training_ = true;  // the mode the last forward ran in
  bool replaying_ = false;        // backward is re-running a recomputed block
};

}  // namespace meshtrain
