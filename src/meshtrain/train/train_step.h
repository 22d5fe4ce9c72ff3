// One training step of any Model (nn/model.h): forward/backward over the
// micro-batches of a step (gradient accumulation), with the gradient
// synchronization strategy (parallel/gradient_sync.h: local, replicated
// data parallelism, ZeRO 1-3) called around each backward, then
// global-norm clipping and the optimizer (optim/optimizer.h: AdamW, SGD,
// LARS, LAMB) over the strategy's update range. The step has no branch on
// which strategy or optimizer runs.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "meshtrain/nn/model.h"
#include "meshtrain/optim/optimizer.h"
#include "meshtrain/optim/lr_schedule.h"
#include "meshtrain/parallel/gradient_sync.h"
#include "meshtrain/parallel/pipeline_executor.h"
#include "meshtrain/parallel/tp_group.h"
#include "meshtrain/train/mixed_precision.h"
#include "meshtrain/train/slow_rank.h"

namespace meshtrain {

// The fp32 gradient decision every rank takes alike: the global gradient norm
// and whether the loss and every gradient are finite on every rank.
struct GradientCheck {
  double norm = 0.0;
  bool finite = true;
};
// `grads` holds elements [begin, end) of the flat gradient buffer (indexed
// from the buffer's start). sharded: each rank holds a different range and the
// sums of squares are added across `comm`; otherwise the range is replicated
// (already averaged) and only the finiteness is agreed. comm may be null.
GradientCheck check_gradients(double loss, const float* grads, int64_t begin, int64_t end,
                              comm::Communicator* comm, bool sharded);

// Model parallelism's share of the norm. Tensor parallelism: the logical
// model's squares are the split parameters' summed over the tp group plus the
// replicated ones (the same on every tp rank) counted once, by tp rank 0.
// Pipeline parallelism: each stage's squares summed over the pp group, a
// parameter held by two stages (a tied embedding) counted by its first holder.
struct TensorParallelNorm {
  comm::Communicator* tp = nullptr;  // null: no tensor parallelism
  std::vector<ElemSpan> replicated;  // the layout's replicated parameters
  comm::Communicator* pp = nullptr;  // null: no pipeline parallelism
  std::vector<ElemSpan> counted_elsewhere;  // by another stage
};
// `grads` lives on `device`; its squares are summed by that device's kernels.
GradientCheck check_gradients(double loss, const float* grads, int64_t begin, int64_t end,
                              comm::Communicator* comm, bool sharded, const TensorParallelNorm& tp,
                              Device device = Device::cpu());

struct StepStats {
  float loss = 0.f;        // mean over micro-batches (and over ranks); token-weighted: over targets
  double grad_norm = 0.0;  // before clipping
  float lr = 0.f;
  bool finite = true;      // false: loss or gradients had inf/NaN (on any rank); update skipped
  double forward_s = 0, backward_s = 0, optimizer_s = 0;
  float loss_scale = 1.f;         // fp16: the loss scale this step's backward used
  bool overflow_skipped = false;  // fp16: skipped for an overflow (the scale was lowered)
  parallel::CommTiming comm;  // gradient synchronization of this step
  // Tensor-parallel collectives inside forward and backward (blocking, so
  // all exposed); forward_s and backward_s leave them out.
  double tp_comm_s = 0;
  double update_wait_s = 0;   // the update waited for the before-update fence (a checkpoint snapshot)
  // Pipeline parallelism: blocked in receives (the bubble and the transfers)
  // and the tied parameters' exchange; forward_s then holds forward and
  // backward together.
  double pp_wait_s = 0;
};

class TrainStep {
 public:
  // `sync` is attached to `model`; the optimizer state covers its update range.
  TrainStep(Model& model, parallel::GradientSync& sync, const OptimizerConfig& optimizer,
            LrSchedule schedule, float clip);
  // Runs forward/backward for each micro-batch and then the update for `step`
  // (0-based, drives the schedule).
  StepStats run(const std::vector<MicroBatch>& micro, int64_t step);
  Optimizer& optimizer() { return *opt_; }
  const LrSchedule& schedule() const { return schedule_; }
  // The schedule's length (train.max_minutes may shorten the run).
  void set_total_steps(int64_t total) { schedule_.total = total; }
  // Mixed precision (train/mixed_precision.h): fp16 loss scaling and its
  // skip decision. Optional; must outlive this object.
  void set_mixed_precision(MixedPrecision* mp) { mp_ = mp; }
  // Called right before the update writes parameters and optimizer state
  // (the only place a step changes them, every strategy and precision
  // included): an asynchronous checkpoint's snapshot copy must finish first.
  // Returns the seconds it waited (StepStats::update_wait_s).
  void set_before_update(std::function<double()> fence) { before_update_ = std::move(fence); }
  // Tensor parallelism: the gradient norm (clipping) is the logical model's,
  // and every tp rank takes the same skip decision; `group` (optional) times
  // the tp collectives (StepStats::tp_comm_s). Both must outlive this object.
  void set_tensor_parallel(const comm::Communicator* tp,
                           const parallel::CommTensorParallelGroup* group = nullptr);
  // Masked data (instruction tuning): the step's loss is the mean over every
  // target not ignored in all its micro-batches on all data-parallel ranks,
  // not the mean of the micro-batches' means. Each micro-batch's gradient is
  // weighted by its share of those targets (one scalar allreduce over dp per
  // step, before the first forward). A step with no target at all is an error.
  void set_token_weighted(bool on) { token_weighted_ = on; }
  // Pipeline parallelism (one model chunk per stage for now): the
  // micro-batches run through `exec` (parallel/pipeline_executor.h) on the
  // stage this step's model is; the loss comes from the last stage, the
  // gradient norm sums every stage's squares (a tied parameter counted by
  // its first holder only) and every stage skips a non-finite step alike.
  // `pp` is the executor's pipeline group. Both must outlive this object.
  void set_pipeline(parallel::PipelineExecutor* exec, const comm::Communicator* pp);
  // A straggler on purpose (train/slow_rank.h): the step's forward and
  // backward take its factor times as long, before the gradients are handed on.
  void set_slow_rank(SlowRank s) { slow_ = s; }

 private:
  // Waits for the model's device: its ops are queued, so a phase's time is
  // taken once the device has done its work (nothing to wait for on the CPU).
  void settle_device() const;
  Model& model_;
  parallel::GradientSync& sync_;
  // Where the other pieces of each layer's norms are (LARS, LAMB).
  void update_norm_group();
  std::unique_ptr<Optimizer> opt_;
  LrSchedule schedule_;
  float clip_;
  MixedPrecision* mp_ = nullptr;
  std::function<double()> before_update_;
  comm::Communicator tp_comm_;  // the tp group tp_norm_ reduces over
  TensorParallelNorm tp_norm_;  // and the pipeline's share, with set_pipeline
  const parallel::CommTensorParallelGroup* tp_group_ = nullptr;
  bool token_weighted_ = false;
  parallel::PipelineExecutor* pipe_ = nullptr;
  comm::Communicator pp_comm_;            // the pipeline group
  // Per chunk: its forward's and its backward's parameter uses (ZeRO-3's gathers).
  std::vector<std::array<std::vector<ParamUse>, 2>> pass_orders_;
  SlowRank slow_;
};

}  // namespace meshtrain
