// The training loop: data, steps with gradient accumulation, periodic
// validation, progress display, metrics and the final model file. With a
// communicator of several ranks it trains data-parallel: each rank reads its
// slice of every global batch, gradients are synchronized by the strategy
// chosen once at setup (parallel/make_gradient_sync.h: replicated buckets
// overlapped with backward, or ZeRO 1-3), and rank 0 alone prints, writes
// metrics and saves the model. Telemetry: metrics.jsonl, TensorBoard events,
// an optional per-rank trace merged into trace.json, and an end-of-run
// summary. Checkpoints (train/training_checkpoints.h): resume at start, save
// every checkpoint.every steps.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "meshtrain/comm/communicator.h"
#include "meshtrain/nn/model.h"
#include "meshtrain/nn/precision.h"
#include "meshtrain/nn/recompute.h"
#include "meshtrain/optim/optimizer.h"
#include "meshtrain/optim/loss_scaler.h"
#include "meshtrain/optim/lr_schedule.h"
#include "meshtrain/parallel/data_parallel.h"
#include "meshtrain/parallel/local_sgd.h"
#include "meshtrain/parallel/parameter_server.h"
#include "meshtrain/train/memory_report.h"
#include "meshtrain/train/training_checkpoints.h"

namespace meshtrain {

struct TrainerOptions {
  std::shared_ptr<const ModelSpec> model;  // from the model registry (nn/model_registry.h)
  std::string init_from;      // model file to start from (empty: random init)
  std::string train_pattern, val_pattern;  // shard globs (val may be empty)
  int data_workers = 2;                     // image decoding threads per rank
  int micro_batch = 8, seq_len = 0, grad_accum = 1;
  Recompute recompute;        // activation checkpointing (same results, less memory)
  int64_t steps = 100;
  LrSchedule schedule;
  OptimizerConfig optimizer;  // optim/optimizer.h: AdamW, SGD, LARS, LAMB
  float clip = 1.0f;
  int64_t eval_every = 100, eval_batches = 20, log_every = 1, save_every = 0;
  int64_t sample_every = 0;   // print a short generated sample every N steps
  // > 0: after a few timed steps, shorten the run (steps stays the cap) so it
  // ends about this many minutes after training started; the LR schedule ends
  // with it. Saved in checkpoints, so a resumed run keeps the decided length.
  double max_minutes = 0;
  int64_t max_bad_steps = 5;  // consecutive non-finite steps before giving up
  // Mixed precision (train/mixed_precision.h): bf16/fp16 compute with f32
  // master weights; fp16 adds dynamic loss scaling (its overflow skips are
  // not "bad steps": loss_scale.max_consecutive_skips bounds them).
  Precision precision = Precision::FP32;
  LossScalerConfig loss_scale;
  uint64_t seed = 1;
  std::string run_dir = "runs/default";
  std::string model_out;      // final model path (default run_dir/model.safetensors)
  std::string resolved_config_json;  // written to run_dir/config.json
  // Data parallelism over this communicator's ranks when it has more than one
  // (invalid or size 1: single process, no communication at all).
  comm::Communicator comm;
  parallel::DataParallelOptions dp;
  parallel::LocalSgdOptions local_sgd;  // parallel.local_sgd: enabled replaces the per-step reduction
  // parallel.parameter_server: enabled, the ranks train asynchronously
  // against shared shards (parallel/parameter_server.h).
  parallel::ParameterServerOptions parameter_server;
  // Tensor parallelism: ranks per tp group (parallel.tp); the mesh is
  // (world / tp) data-parallel groups of tp ranks, tp innermost.
  int tp = 1;
  bool sequence_parallel = false;  // tp > 1: norms and residual stream split over tp
  // A model whose layers can use the whole data-parallel batch (batch norm,
  // ModelSpec::uses_replica_group) gets the dp group (model.sync_bn).
  bool sync_bn = false;
  // Pipeline parallelism: stages (pp outermost in the mesh) and the schedule
  // over grad_accum micro-batches (parallel/pipeline_executor.h).
  int pp = 1;
  std::string pipe_schedule = "1f1b";
  int pipe_chunks = 1;  // model chunks per rank (virtual stages; interleaved)
  std::vector<int> pipe_stage_layers;  // layers per virtual stage; empty = balanced by cost
  // ZeRO over the data-parallel ranks (parallel/zero.h): 0 = plain data parallelism.
  int zero_stage = 0;
  int64_t zero_persist_threshold = 100000;
  // Per-rank memory limit (0 = none): a configuration predicted above it is
  // refused before training; the bytes per parameter the formulas use.
  double memory_limit_bytes = 0;
  StateBytes state_bytes;
  bool trace = false;                  // Chrome/Perfetto trace of every rank
  double price_per_device_hour = 0;    // cost numbers; 0 = none
  double peak_gflops = 0;              // MFU denominator per rank; 0 = measure at start-up
  CheckpointOptions checkpoint;
  // Where the model, its gradients and the optimizer state live and its
  // kernels run (config `device`); one rank only on a device other than the CPU.
  Device device = Device::cpu();
};

struct TrainerSummary {
  int64_t steps = 0;          // the last step taken (the resumed step counts)
  int64_t resumed_step = 0;   // 0 = started fresh
  float final_loss = 0.f, final_val_loss = -1.f;
  double tokens_per_s = 0.0, seconds = 0.0;
  std::string model_path;
};

TrainerSummary run_trainer(const TrainerOptions& opt);

}  // namespace meshtrain
