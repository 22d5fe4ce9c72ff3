// ZeRO (stages 1-3) over a communicator's ranks: data parallelism without the
// redundant copies. Every stage shards by the same equal contiguous ranges of
// the flat buffer (zero_layout.h; the checkpoint shards), so checkpoints are
// alike for all stages and reshard between them.
//   stage 1: gradients averaged as in DataParallel (bucketed allreduce during
//            backward); each rank's AdamW state covers its own range only;
//            updated parameters gathered from their owners (zero_parameters.h).
//   stage 2: + gradients reduced to their owners during backward, kept only
//            as the own fp32 shard (zero_gradients.h).
//   stage 3: + parameters sharded: each unit gathered before use, freed after.
// Mixed precision (ZeroOptions::precision bf16/fp16): at every stage the f32
// parameters are the master weights and only the own range of them stays
// resident (optimizer state); the model computes on a 16-bit copy, whole on
// every rank in stages 1 and 2 and gathered per unit in stage 3: owners round
// their range after the update and the 16-bit pieces are what is gathered
// (zero_parameters.h). params() is whole again only inside
// gather_full_parameters() ... resume_hooks().
//
//   Zero zero(comm, spec, {stage});
//   auto model = zero.make_model();   // buffers as the stage needs them
//   zero.init_weights(*model, seed);  // or load (without own_range_init)
//   zero.attach(*model);
//   zero.broadcast_parameters();      // rank 0's weights (unless each rank
//                                     // initialized its own range)
//   zero.shard();                     // stage 3: drop foreign parameters
//   ... optimizer over own(); resume into own ranges ...
//   zero.start();                     // gather from the owners
//   per step: zero_grad(); per micro-batch: forward; begin_backward(last);
//             backward; end_backward(last); then before_update(); AdamW over
//             own() with gradients(); after_update().
// It is the sharded GradientSync (parallel/gradient_sync.h). Everything it
// knows about the model comes from the spec's ParamLayout: the units, the
// parameter-hook order, the parameters read in f32, the bracketed unit.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>

#include "meshtrain/comm/communicator.h"
#include "meshtrain/nn/model.h"
#include "meshtrain/parallel/data_parallel.h"
#include "meshtrain/parallel/reserved_buffer.h"
#include "meshtrain/parallel/zero_gradients.h"
#include "meshtrain/parallel/zero_layout.h"
#include "meshtrain/parallel/zero_parameters.h"

namespace meshtrain::parallel {

struct ZeroOptions {
  int stage = 1;
  // Stage 3: units with fewer elements stay resident (replicated).
  int64_t persist_threshold = 100000;
  // Stage 1's gradient buckets; its grad_dtype (f32 or bf16) is every
  // stage's gradient wire format.
  DataParallelOptions dp;
  // Mixed precision: make_model() sets it on the model (nn/model.h) with the
  // 16-bit copy in this object's buffer.
  Precision precision = Precision::FP32;
  // Setup can write just a range of the parameters: the run starts from the
  // seed with a family whose initial weights are a function of the element
  // (ModelSpec::initial_weights), or from a file read by range
  // (ckpt::can_load_range). Where this stage keeps only its own range of the
  // f32 parameters, each rank then writes just that (init_weights, or a load
  // into setup_range()), and no foreign part is ever resident or broadcast.
  bool own_range_init = false;
};

// Whether a ZeRO run with these options writes only each rank's own range
// at setup: own_range_init at stage 3 or with mixed precision (where only
// that range of the f32 parameters stays). The memory prediction asks it too.
bool starts_from_own_range(const ZeroOptions& opts);

class Zero final : public GradientSync {
 public:
  Zero(comm::Communicator comm, std::shared_ptr<const ModelSpec> spec, ZeroOptions opts);
  ~Zero() override;
  Zero(const Zero&) = delete;
  Zero& operator=(const Zero&) = delete;

  int stage() const { return opts_.stage; }
  int rank() const { return comm_.rank(); }
  int size() const { return comm_.size(); }
  comm::Communicator* comm() override { return &comm_; }
  const ZeroLayout& layout() const { return layout_; }
  ElemSpan own() const { return layout_.own(); }
  // Stage 1's DataParallel (its buckets), null otherwise.
  DataParallel* data_parallel() { return dp_.get(); }

  // The model, built on the buffers this stage needs. Call once.
  std::unique_ptr<Model> make_model();
  // Installs the parameter and grad-ready hooks. Destroy the model first, or
  // detach() it before this object goes while the model lives on.
  void attach(Model& model) override;
  void detach() override;
  // Collective: rank 0's full parameters to every rank (before shard()).
  void broadcast_parameters();
  // Stage 3: keep only the own range and the persistent units (call before
  // the optimizer state is allocated, so setup never holds both in full).
  void shard();
  // Every rank's own range holds the training weights (after resume): all
  // stages gather the rest from the owners.
  void start();

  std::string name() const override { return "zero-" + std::to_string(opts_.stage); }
  std::string describe() const override;
  void init_weights(Model& model, uint64_t seed) override;
  std::optional<ElemSpan> setup_range() const override;
  void before_resume() override;
  std::optional<ElemSpan> resume_range() const override { return own(); }
  void after_resume() override { start(); }
  void release_full_parameters() override { resume_hooks(); }
  void zero_grad() override;
  void begin_backward(bool last_micro_batch) override;
  void set_backward_span(ElemSpan span) override;
  void set_parameter_pass(const std::vector<ParamUse>& order) override;
  // Stages 2/3 reduce every micro-batch (returns the wait); stage 1 after the last.
  double end_backward(bool last_micro_batch) override;
  // Gradients for the update: element i of the flat buffer, for i in own(),
  // is gradients()[i] (the pointer is offset so the optimizer's whole-buffer
  // indexing works).
  float* gradients() override;
  ElemSpan update_range() const override { return own(); }
  bool sharded() const override { return true; }
  void before_update() override;
  void after_update() override;
  // Stage 1's codec (stages 2-3 reduce exactly: nothing kept).
  void set_gradient_scale(float scale) override {
    if (dp_) dp_->set_gradient_scale(scale);
  }
  void update_skipped() override {
    if (dp_) dp_->update_skipped();
  }
  SyncState checkpoint_state() override { return dp_ ? dp_->checkpoint_state() : SyncState{}; }
  void restore_counters(const nlohmann::json& j) override {
    if (dp_) dp_->restore_counters(j);
  }
  const CommTiming& timing() const override { return timing_; }

  // Collective: the whole f32 model current on rank 0 (only there) and the
  // hooks paused, so rank 0 may save it or generate from it (through a
  // decoder on the f32 buffer); resume_hooks() returns to sharding.
  void gather_full_parameters() override;
  void resume_hooks();
  // Elements held replicated besides the own range (stage 3's persistent units).
  int64_t persistent_elements() const;

 private:
  comm::Communicator comm_;
  std::shared_ptr<const ModelSpec> spec_;
  ZeroOptions opts_;
  ZeroLayout layout_;
  Model* model_ = nullptr;
  std::unique_ptr<DataParallel> dp_;             // stage 1
  Tensor param_tensor_;                          // stage 2
  std::unique_ptr<ReservedBuffer> param_res_;    // stage 3; every stage with mixed precision
  std::unique_ptr<ReservedBuffer> half_res_;     // mixed precision's 16-bit copy
  std::unique_ptr<ReservedBuffer> grad_res_;     // stages 2, 3
  bool own_start_ = false;                       // starts_from_own_range
  std::unique_ptr<ZeroGradients> grads_;         // stages 2, 3
  std::unique_ptr<ZeroParameters> params_;
  CommTiming timing_;
  double backward_start_ = 0;
  // Where the step's last backward began in ZeroGradients' counts, so the
  // timing reports that backward's reductions as DataParallel does.
  size_t last_watched_ = 0;
  int64_t last_reductions_ = 0;
};

}  // namespace meshtrain::parallel
