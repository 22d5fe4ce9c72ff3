// The trainer's side of checkpoints: resuming model, optimizer and data
// position at start, and saving them every N steps through ckpt::CheckpointWriter
// (async by default). Every rank calls both; the choice of checkpoint and the
// saves are collective (docs/FAULT_TOLERANCE.md).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "meshtrain/ckpt/checkpoint_writer.h"
#include "meshtrain/comm/communicator.h"
#include "meshtrain/data/data_loader.h"
#include "meshtrain/nn/model.h"
#include "meshtrain/optim/optimizer.h"
#include "meshtrain/parallel/gradient_sync.h"
#include "meshtrain/train/model_parallel_checkpoint.h"

namespace meshtrain {

struct CheckpointOptions {
  std::string dir;              // checkpoint root ("" = no checkpoints and no resume)
  int64_t every = 0;            // steps between saves; 0 = none
  int keep_last = 3;            // 0 = keep all
  int64_t milestone_every = 0;  // also keep multiples of this; 0 = none
  bool async = true;              // async saves also take their snapshot in the background
  // Buddy copies in memory (ckpt/buddy_copies.h) every this many steps and at
  // every disk save; 0 = none. A restart takes them before the disk when
  // they are at least as new.
  int64_t memory_every = 0;
  std::string memory_dir = "/dev/shm";  // node-local memory; the run's store is under it
  double snapshot_delay_s_for_testing = 0;  // test hook (ckpt::WriterOptions)
  std::function<void(ckpt::SaveStage, int64_t)> on_save_stage_for_testing;  // test hook (the same)
  std::string resume = "never";  // "auto" | "never" | a checkpoint directory
};

// Where a resumed run continues.
struct ResumePoint {
  std::string dir;
  int64_t step = 0;                  // steps already taken: the loop continues at step + 1
  data::LoaderPosition position;     // the next global batch
  std::vector<std::string> skipped;  // newer checkpoints passed over, with reasons
  std::string memory_note;           // resumed from in-memory copies: what this node received
  std::string data_note;             // non-empty when the data order cannot continue exactly
  nlohmann::json loss_scaler;        // fp16 loss scaler state (null: none saved)
  int64_t budgeted_steps = 0;        // the length train.max_minutes decided (0: none)
};

// Restores parameters and optimizer state per `opt.resume`; nullopt = start
// fresh ("never", or "auto" with no usable checkpoint). An explicit directory
// that cannot be loaded is an error. `global_batch` (sequences per step)
// decides whether the saved data position carries over as is. `own_params`
// (ZeRO): read only this range of the parameters (the other ranks read
// theirs; ZeRO gathers them afterwards); the optimizer reads its own range.
// `tp` (tensor parallelism): the checkpoint is logical; this shard reads its
// runs, and `comm` is the world's. `sync`: the gradient-sync strategy whose
// state (parallel/sync_state.h) the checkpoint carries, restored with it
// (not under tensor or pipeline parallelism, whose checkpoints are logical).
std::optional<ResumePoint> resume_training(const CheckpointOptions& opt, const Model& model,
                                           Optimizer& optimizer, comm::Communicator* comm,
                                           int64_t global_batch,
                                           std::optional<ckpt::ElemRange> own_params = {},
                                           const ModelParallelCheckpoint* tp = nullptr,
                                           parallel::GradientSync* sync = nullptr);

// Saves every `every` steps. Construct on every rank (collective).
class TrainingCheckpointer {
 public:
  // `comm`: the ranks that write (the dp group, or the world under tensor
  // parallelism, with `tp` set); `mesh` is recorded in the index.
  // `start_step`: where this run began (0, or the step it resumed from); the
  // in-memory copies of later steps are cleared (they will be saved again).
  TrainingCheckpointer(const CheckpointOptions& opt, comm::Communicator* comm,
                       nlohmann::json config, ckpt::MeshShape mesh, int64_t global_batch,
                       const ModelParallelCheckpoint* tp = nullptr, int64_t start_step = 0);
  bool due(int64_t step) const { return disk_due(step) || memory_due(step); }
  // A save of this step goes to the checkpoint directory (not only to memory).
  bool disk_due(int64_t step) const { return every_ > 0 && step % every_ == 0; }
  // Records the run length train.max_minutes decided in the configuration
  // every later checkpoint saves (ResumePoint::budgeted_steps reads it back).
  void set_budgeted_steps(int64_t steps) { config_["train"]["budgeted_steps"] = steps; }
  // Collective. `step` = steps taken; `next` = the loader position of the next
  // step's batch. Returns the time training waited: bookkeeping when async
  // (the snapshot is copied in the background: call wait_for_snapshot()
  // before the parameters or optimizer state change again), the whole save
  // when synchronous.
  // `own_params` (ZeRO): this rank holds current parameters only there.
  // `loss_scaler`: the fp16 loss scaler's state (null: none). `sync`: the
  // gradient-sync strategy whose state goes along (its tensors are copied
  // here: a codec changes them during the next backward).
  double save(int64_t step, const Model& model, Optimizer& optimizer, data::LoaderPosition next,
              std::optional<ckpt::ElemRange> own_params = {},
              const nlohmann::json& loss_scaler = nullptr,
              parallel::GradientSync* sync = nullptr);
  // Blocks until the last save's snapshot is taken, so parameters and
  // optimizer state may change (the optimizer update calls it); returns the
  // seconds waited (0 when nothing was pending).
  double wait_for_snapshot();
  // Blocks until every save is complete; re-throws a background error.
  void wait();
  // Collective, at the end of a run that finished: wait(), then the run's
  // in-memory copies are removed.
  void finish();
  // What this rank's node held of the in-memory copies when finish() removed
  // them (bytes of its files: its ranks' shards and their buddies', the
  // newest steps); 0 without the memory tier.
  int64_t memory_copies_bytes() const { return memory_copies_bytes_; }

 private:
  // In-memory copies are also taken with every disk save, so they are never
  // older than the disk's newest checkpoint.
  bool memory_due(int64_t step) const {
    return memory_writer_ && (disk_due(step) || step % memory_every_ == 0);
  }
  std::unique_ptr<ckpt::CheckpointWriter> make_writer(const CheckpointOptions& opt,
                                                      const std::string& root, bool buddy_copies);
  // Tensor parallelism: the save in the logical layout (model_parallel_checkpoint.h).
  ckpt::SaveRequest logical_request(int64_t step, const Model& model, Optimizer& optimizer,
                                    std::optional<ckpt::ElemRange> own_params);
  int64_t every_;
  nlohmann::json config_;
  ckpt::MeshShape mesh_;
  int64_t global_batch_;
  const ModelParallelCheckpoint* tp_ = nullptr;
  // Tensor parallelism: this rank's blocks of the logical params and of each
  // optimizer state tensor (what the writer copies), kept until the snapshot
  // is taken.
  std::vector<std::vector<float>> blocks_;
  // The gradient-sync state's copies, kept until the snapshot is taken.
  void add_sync_state(ckpt::SaveRequest& req, parallel::GradientSync& sync, Optimizer& optimizer);
  std::vector<std::vector<float>> sync_blocks_;
  std::unique_ptr<ckpt::CheckpointWriter> writer_;
  // The memory tier (buddy copies), when checkpoint.memory_every is set.
  int64_t memory_every_ = 0;
  std::string memory_store_;
  comm::Communicator* comm_ = nullptr;
  std::unique_ptr<ckpt::CheckpointWriter> memory_writer_;
  int64_t memory_copies_bytes_ = 0;
};

}  // namespace meshtrain
