// A rank of an interleaved pipeline holds several virtual stages (chunks):
// chunk c is virtual stage c * stages + stage, each a contiguous layer range
// of the model. ChunkedSpec/ChunkedModel present them to the engine as one
// model on one flat parameter buffer and one gradient buffer, so the gradient
// sync, the optimizer, checkpoints and the memory report work unchanged, while
// the pipeline executor runs each chunk's model (Model::pipeline_chunks) on
// views of those buffers. Family-neutral: the chunks are any family's stage
// specs (ModelSpec::sharded with a layer range).
//
// The buffer holds the chunks highest first: chunk 0 sits at the top. Every
// schedule ends a step with chunk 0's last backward, so that backward reports
// its gradients from the top of the buffer down, as the data-parallel
// reduction expects of the step's last backward (parallel/gradient_sync.h),
// and the other chunks, finished earlier, are reduced after it.
#pragma once
#include <memory>
#include <vector>

#include "meshtrain/nn/model.h"

namespace meshtrain {

class ChunkedSpec final : public ModelSpec {
 public:
  // chunks[c]: chunk c's spec; slots[c]: the activation slots (micro-batches
  // in flight) its schedule holds, which memory() counts. Parameter names
  // must be distinct across the chunks.
  ChunkedSpec(std::vector<std::shared_ptr<const ModelSpec>> chunks, std::vector<int> slots);

  std::string family() const override { return chunks_[0]->family(); }
  nlohmann::json to_json() const override { return chunks_[0]->to_json(); }  // the whole model
  std::string describe() const override;
  const ParamLayout& layout() const override { return layout_; }
  // Chunk 0's shard (its tensor-parallel rank and layer range), and other
  // shards of the whole model the chunks are cut from (a ModelShard{} is
  // the whole model: what a checkpoint holds).
  ModelShard shard() const override { return chunks_[0]->shard(); }
  std::shared_ptr<const ModelSpec> sharded(const ModelShard& shard) const override {
    return chunks_[0]->sharded(shard);
  }
  int seq_len() const override { return chunks_[0]->seq_len(); }
  int num_layers() const override { return chunks_[0]->num_layers(); }
  int vocab_size() const override { return chunks_[0]->vocab_size(); }
  // The whole model's, as every shard spec answers.
  double flops_per_token(int T) const override { return chunks_[0]->flops_per_token(T); }
  // Every chunk's memory with its own slots; the result is for one slot
  // (predict_training_memory(..., activation_slots = 1)).
  ModelMemory memory(int B, int T, int nthreads, const Recompute& recompute,
                     Precision precision) const override;
  std::unique_ptr<Model> build(ModelBuffers buffers = {}) const override;
  bool initial_weights(uint64_t seed, ElemSpan range, float* buffer) const override;
  // LoRA chunks: their frozen bases as chunks of one buffer in the same
  // order (what the rank holds of the base; its models are the chunks'
  // own, each chunk model's frozen_base()).
  std::shared_ptr<const ModelSpec> frozen_base() const override { return frozen_; }
  Precision frozen_precision() const override { return chunks_[0]->frozen_precision(); }

  int num_chunks() const { return static_cast<int>(chunks_.size()); }
  const ModelSpec& chunk(int c) const { return *chunks_[static_cast<size_t>(c)]; }
  // Where chunk c's parameters start in the flat buffer, and its first unit.
  int64_t offset(int c) const { return offsets_[static_cast<size_t>(c)]; }
  int unit_offset(int c) const { return unit_offsets_[static_cast<size_t>(c)]; }

 private:
  std::vector<std::shared_ptr<const ModelSpec>> chunks_;
  std::vector<int> slots_;
  std::vector<int64_t> offsets_;
  std::vector<int> unit_offsets_;
  ParamLayout layout_;
  std::shared_ptr<const ChunkedSpec> frozen_;
};

class ChunkedModel final : public Model {
 public:
  ChunkedModel(std::shared_ptr<const ChunkedSpec> spec, ModelBuffers buffers);

  const ModelSpec& spec() const override { return *spec_; }
  const Tensor& param_buffer() const override { return params_; }
  const Tensor& grad_buffer() const override { return grads_; }
  void init_weights(uint64_t seed) override;
  // A whole forward or backward crosses other ranks' chunks: refused (the
  // pipeline executor runs the chunks).
  float forward(const MicroBatch& batch) override;
  void backward(float loss_scale) override;
  std::vector<Model*> pipeline_chunks() override;
  void zero_grad() override;
  const float* logits() const override;
  int logits_stride() const override;
  // Hooks see the flat buffer's offsets and units: each chunk's are shifted.
  void set_grad_ready_hook(GradReadyHook hook) override;
  void set_param_hook(ParamHook hook) override;
  void set_recompute(const Recompute& recompute) override;
  const Recompute& recompute() const override { return chunks_[0]->recompute(); }
  void set_precision(Precision p) override;
  Precision precision() const override { return chunks_[0]->precision(); }
  void use_external_half_copy(Tensor buffer) override;
  bool external_half_copy() const override { return chunks_[0]->external_half_copy(); }
  void set_tensor_parallel_group(std::shared_ptr<TensorParallelGroup> group) override;
  void hold_parameters(bool held) override;
  void release_activations() override;
  void weights_loaded() override;

 private:
  std::shared_ptr<const ChunkedSpec> spec_;
  Tensor params_, grads_;
  std::vector<std::unique_ptr<Model>> chunks_;
};

}  // namespace meshtrain
