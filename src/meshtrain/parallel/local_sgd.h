// Local SGD and DiLoCo (Lin et al. 2020; Douillard et al. 2023): every rank
// runs the optimizer on its own gradients (no reduction per step), and
// every `sync_every` (H) steps the ranks average how far they moved since
// the last average and apply it with an outer optimizer, SGD with
// (Nesterov) momentum, to the shared anchor:
//   delta = mean over ranks of (anchor - params)     one allreduce per H steps
//   v = mu v + delta;  anchor -= outer_lr (nesterov ? delta + mu v : v)
//   params = anchor on every rank
// outer_lr 1 and momentum 0 is plain model averaging (local SGD); DiLoCo's
// recipe is outer_lr 0.7, momentum 0.9, Nesterov, H in the hundreds. H = 1
// with an inner optimizer that is linear in the gradient (SGD, momentum,
// Nesterov, weight decay; no clipping) trains what synchronous data
// parallelism trains; AdamW's local steps are not a linear function of the
// gradient, so there it approximates it.
// Between averages the replicas differ: saving and sampling read an
// averaged state. The config keeps checkpoint and sampling steps and the
// step count on multiples of H; a run stopped elsewhere (train.max_minutes)
// averages early before it saves. The anchor and outer momentum live in host
// memory (8 bytes per parameter with momentum, 4 without); checkpoints keep
// the outer momentum and each rank's inner optimizer state, so a resumed run
// continues exactly.
#pragma once
#include <cstdint>

#include "meshtrain/comm/communicator.h"
#include "meshtrain/core/tensor.h"
#include "meshtrain/parallel/gradient_sync.h"

namespace meshtrain::parallel {

// Config "parallel.local_sgd" (docs/CONFIG.md).
struct LocalSgdOptions {
  int64_t sync_every = 0;      // H; 0 = off (synchronous data parallelism)
  float outer_lr = 1.0f;
  float outer_momentum = 0.0f;
  bool nesterov = true;
  bool enabled() const { return sync_every > 0; }
};

class LocalSgd final : public GradientSync {
 public:
  LocalSgd(comm::Communicator comm, LocalSgdOptions opts);
  std::string name() const override { return "local-sgd"; }
  std::string describe() const override;
  void attach(Model& model) override;
  void detach() override { model_ = nullptr; }
  void zero_grad() override;
  void begin_backward(bool) override {}
  double end_backward(bool) override { return 0; }
  float* gradients() override;
  ElemSpan update_range() const override;
  bool sharded() const override { return false; }
  comm::Communicator* comm() override { return &comm_; }
  const CommTiming& timing() const override { return timing_; }
  // Every H-th update: the outer step (blocking, one allreduce).
  void after_update() override;
  // Rank 0's parameters to every rank; they become the anchor.
  void after_resume() override;
  // Averages now (an early outer step) if the replicas differ.
  void gather_full_parameters() override;
  void verify_replicas() override;
  // The outer momentum (the same on every rank); each rank's inner
  // optimizer state is its own (saves land on averaged steps, where the
  // parameters and the anchor are the same everywhere).
  SyncState checkpoint_state() override;
  void restore_counters(const nlohmann::json& j) override;
  bool optimizer_state_per_rank() const override { return true; }
  // Local steps since the last average (0: the replicas are equal).
  int64_t steps_since_average() const { return local_steps_; }

 private:
  void average();
  double dense_bytes() const;  // what a per-step f32 allreduce would send

  comm::Communicator comm_;
  LocalSgdOptions opts_;
  Model* model_ = nullptr;
  Tensor anchor_, momentum_;
  int64_t local_steps_ = 0;
  CommTiming timing_;
};

}  // namespace meshtrain::parallel
