// Parameter-server training with bounded staleness (Li et al. 2014; Ho et
// al. 2013's stale synchronous parallel): the parameters and the optimizer
// state live in shards, one per rank (parallel/parameter_store.h); each rank
// is a worker that pulls the current parameters, computes its gradients and
// pushes them, with no collective between steps. A shard applies the waiting
// pushes as one update (their mean, through the run's optimizer) once no
// worker still computing would fall more than `staleness` updates behind.
//
//   staleness 0   every update waits for every worker: synchronous data
//                 parallelism (the same mean gradient, the same optimizer)
//   staleness s   fast workers go on while a slow one computes; its gradient
//                 lands at most s updates late, with whatever else waits,
//                 and, with staleness_lr, an update of gradients a > 1
//                 updates old on average takes lr / a (Zhang et al. 2016)
//
// The run is train.steps x ranks worker steps in all, taken from one shared
// counter: a rank that is twice as fast takes about twice as many. The
// learning rate follows the shared count (step = ticket / ranks), so the
// schedule ends when the run does. Per-step collectives are gone: loss,
// gradient checks and clipping are each worker's own (clipping bounds a
// worker's gradient before it is pushed).
//
// The shards live in one host's shared memory (the shm transport): across
// hosts the store would need MPI one-sided windows or server processes,
// which are not built. Checkpoints, ZeRO, tensor and pipeline parallelism,
// local SGD and compression are refused with it (docs/CONFIG.md says why).
#pragma once
#include <memory>
#include <vector>

#include "meshtrain/comm/communicator.h"
#include "meshtrain/optim/optimizer.h"
#include "meshtrain/parallel/gradient_sync.h"
#include "meshtrain/parallel/parameter_store.h"

namespace meshtrain::parallel {

// Config "parallel.parameter_server" (docs/CONFIG.md).
struct ParameterServerOptions {
  bool enabled = false;
  int64_t staleness = 2;  // updates a gradient may land after its parameters were read
  // An update of gradients a > 1 updates old on average takes lr / a.
  bool staleness_lr = false;
};

class ParameterServer final : public GradientSync {
 public:
  ParameterServer(comm::Communicator comm, ParameterServerOptions opts, OptimizerConfig optimizer);
  ~ParameterServer() override;
  std::string name() const override { return "parameter-server"; }
  std::string describe() const override;
  // Collective: cuts the shards and maps every rank's.
  void attach(Model& model) override;
  void detach() override { model_ = nullptr; }
  void zero_grad() override;
  void begin_backward(bool) override {}
  double end_backward(bool) override { return 0; }
  float* gradients() override;
  ElemSpan update_range() const override;
  bool sharded() const override { return false; }
  // No collective per step: the step treats each worker as alone.
  comm::Communicator* comm() override { return nullptr; }
  const CommTiming& timing() const override { return timing_; }
  void update_skipped() override;
  // Rank 0's parameters into the shards; every rank pulls them.
  void after_resume() override;
  void gather_full_parameters() override;
  void verify_replicas() override;

  bool applies_update() const override { return true; }
  void apply_update(const float* grads, float grad_scale, float lr) override;
  bool asynchronous() const override { return true; }
  std::optional<int64_t> claim_step(int64_t total_steps) override;
  void finish_async() override;
  std::string async_report() const override;

 private:
  void apply(int shard, const float* mean_grads, float lr, int64_t version);

  comm::Communicator comm_;
  ParameterServerOptions opts_;
  OptimizerConfig optimizer_cfg_;
  Model* model_ = nullptr;
  std::unique_ptr<ParameterStore> store_;
  // Shard k's optimizer, its state bound to the shard's shared memory (every
  // worker holds one per shard; whichever applies an update uses its own).
  std::vector<std::unique_ptr<Optimizer>> optimizers_;
  std::vector<Tensor> state_views_;
  int64_t steps_taken_ = 0;     // by this worker
  CommTiming timing_;
};

}  // namespace meshtrain::parallel
