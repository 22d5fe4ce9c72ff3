// How a training step's gradients become the ones the optimizer applies: one
// interface for every data-parallel strategy, chosen once when the trainer
// is built (parallel/make_gradient_sync.h), so the step (train/train_step.h)
// never branches on which one runs.
//
//   LocalGradients  one rank: the model's own gradient buffer, no communication
//   DataParallel    replicated: bucketed allreduce overlapped with backward
//   Zero            stages 1-3: gradients reduced to their owners, each rank
//                   updates its own range, parameters gathered back
//
// Per step: zero_grad(); per micro-batch: forward, begin_backward(last),
// backward, end_backward(last); then the update reads gradients() over
// update_range(), bracketed by before_update()/after_update(). A pipeline
// schedule replaces the micro-batch loop and calls the same four methods.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "meshtrain/comm/communicator.h"
#include "meshtrain/core/elem_span.h"
#include "meshtrain/parallel/sync_state.h"

namespace meshtrain {
class Model;
struct ParamUse;
}

namespace meshtrain::parallel {

// Communication of the last step's gradient reduction (seconds), and the
// order of its events relative to backward (counts, no clock: what a test of
// the overlap can rely on; -1 = not recorded by this strategy).
struct CommTiming {
  int buckets = 0;            // reductions launched
  double exposed_s = 0;       // waiting for reductions after backward(s)
  double total_s = 0;         // time the progress engine spent on the reductions
  double first_launch_s = 0;  // first reduction launched, after the last backward began
  double backward_s = 0;      // the last backward, from begin_backward to end_backward
  // Reductions launched while backward still had gradients to report (before
  // its last grad-ready report): each overlaps the backward of what remains.
  int launched_ahead = -1;
  // Reductions the progress engine's thread had begun (comm::Work::started)
  // when backward returned, i.e. at end_backward(last).
  int started_in_backward = -1;
  // Bytes this rank sent for the reduction (comm/wire_bytes.h: what a
  // bandwidth-optimal algorithm sends; local SGD: its average, in the
  // update), and what the f32 gradients would have needed; -1 = not
  // recorded by this strategy.
  double wire_bytes = -1, dense_bytes = -1;
};

class GradientSync {
 public:
  virtual ~GradientSync() = default;
  virtual std::string name() const = 0;  // "local", "replicated", "zero-2", ...
  // One line for the training log (ranks, transport, buckets or shards).
  virtual std::string describe() const = 0;
  // Installs the strategy's hooks on the model (built on the buffers the
  // strategy asked for).
  virtual void attach(Model& model) = 0;
  // Removes them from a model that is still alive.
  virtual void detach() = 0;
  // Start of a step: gradients to zero.
  virtual void zero_grad() = 0;
  // Around each micro-batch's backward; `last` = the step's last one.
  virtual void begin_backward(bool last_micro_batch) = 0;
  // Returns the seconds it waited for communication (exposed).
  virtual double end_backward(bool last_micro_batch) = 0;
  // The next backward writes only `span` of the gradient buffer (one chunk of
  // an interleaved pipeline rank, parallel/pipeline_executor.h); call before
  // its begin_backward. A sync that reduces every backward (ZeRO-2) reduces
  // just that span; the others reduce the whole buffer at the last one anyway.
  virtual void set_backward_span(ElemSpan) {}
  // The next pass of a pipeline rank (one chunk's forward or backward) uses
  // the parameter units in this Need/Done order; ZeRO-3 gathers along it.
  virtual void set_parameter_pass(const std::vector<ParamUse>&) {}
  // The gradients the update reads: element i of the flat buffer is
  // gradients()[i] for i in update_range() (the pointer may be offset).
  // Writable: a pipeline adds its tied parameters' sums there.
  virtual float* gradients() = 0;
  virtual ElemSpan update_range() const = 0;
  // True when each rank holds a different range of the gradients (norms are
  // summed across ranks); false when they are replicated.
  virtual bool sharded() const = 0;
  // The data-parallel communicator; null with one rank.
  virtual comm::Communicator* comm() = 0;
  // Around the optimizer's write of update_range().
  virtual void before_update() {}
  virtual void after_update() {}
  // fp16 loss scaling: this step's gradients carry `scale` (a lossy codec's
  // residual follows it). Called before the first backward of each step.
  virtual void set_gradient_scale(float) {}
  // The update was skipped for inf/NaN gradients (a codec drops what it
  // kept of them).
  virtual void update_skipped() {}
  virtual const CommTiming& timing() const = 0;

  // Initial weights from the seed (no file to start from): the model's own
  // initialization, or only the part this rank keeps (ZeRO, when it was
  // built with ZeroOptions::own_range_init).
  virtual void init_weights(Model& model, uint64_t seed);
  // The parameters a load at setup (init_from) writes on this rank: nullopt
  // = all; ZeRO built with own_range_init: its own range.
  virtual std::optional<ElemSpan> setup_range() const { return std::nullopt; }
  // Setup around loading weights (init, init_from, resume), in this order:
  //   attach; model initialized; before_resume(); resume into
  //   resume_range() (the parameters this rank reads; nullopt = all);
  //   after_resume() (every rank then trains on the same weights).
  // Replicated: after_resume broadcasts rank 0's parameters. ZeRO: before
  // broadcasts and (stage 3) shards, after gathers from the owners.
  // What a checkpoint must carry for a resumed run to continue exactly
  // (sync_state.h); restore_counters() follows the fill of its tensors.
  virtual SyncState checkpoint_state() { return {}; }
  virtual void restore_counters(const nlohmann::json&) {}
  // The optimizer's state differs between ranks (local SGD's inner steps):
  // checkpoints keep each rank's own.
  virtual bool optimizer_state_per_rank() const { return false; }
  virtual void before_resume() {}
  virtual std::optional<ElemSpan> resume_range() const { return std::nullopt; }
  virtual void after_resume() {}
  // Collective: the whole, current f32 parameter buffer on rank 0 of the
  // group (save a model file, sample through a decoder) until
  // release_full_parameters(); other ranks' buffers may stay partial.
  virtual void gather_full_parameters() {}
  virtual void release_full_parameters() {}
  // Debug check that replicated parameters agree across ranks.
  virtual void verify_replicas() {}

  // A strategy that applies the update itself (the parameter server: on
  // shared shards, with their optimizer state) instead of the step's
  // optimizer over update_range(): the step hands it the gradients, the
  // multiplier the optimizer would have applied (clipping, loss scale) and
  // the learning rate.
  virtual bool applies_update() const { return false; }
  virtual void apply_update(const float* /*grads*/, float /*grad_scale*/, float /*lr*/) {}
  // Asynchronous strategies: the ranks take different numbers of steps, with
  // no collective between them (comm() is null), until the run's steps x
  // ranks are taken. claim_step() starts this rank's next step (its
  // parameters current) and returns the step the schedule reads, or nullopt
  // when the run is over; finish_async() (collective) then leaves every
  // rank with the same final parameters.
  virtual bool asynchronous() const { return false; }
  virtual std::optional<int64_t> claim_step(int64_t /*total_steps*/) { return std::nullopt; }
  virtual void finish_async() {}
  // One line on how the asynchronous run went (rank 0 prints it).
  virtual std::string async_report() const { return {}; }
};

// Debug check (collective over `comm`) that `params` is the same on every
// rank; throws naming `who` and the rank otherwise.
void check_replicas_equal(comm::Communicator& comm, const Tensor& params, const char* who);

// One rank, no communication.
class LocalGradients final : public GradientSync {
 public:
  std::string name() const override { return "local"; }
  std::string describe() const override { return "single rank: no gradient communication"; }
  void attach(Model& model) override { model_ = &model; }
  void detach() override { model_ = nullptr; }
  void zero_grad() override;
  void begin_backward(bool) override {}
  double end_backward(bool) override { return 0; }
  float* gradients() override;
  ElemSpan update_range() const override;
  bool sharded() const override { return false; }
  comm::Communicator* comm() override { return nullptr; }
  const CommTiming& timing() const override { return timing_; }

 private:
  Model* model_ = nullptr;
  CommTiming timing_;
};

}  // namespace meshtrain::parallel
