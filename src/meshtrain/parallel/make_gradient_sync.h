// Chooses the gradient synchronization strategy (parallel/gradient_sync.h)
// once, from the data-parallel group and the ZeRO stage, and builds the
// model on the buffers that strategy needs (shared memory for bucketed
// allreduce, ZeRO's reserved buffers), attached. Invalid combinations are
// errors here, never fallbacks further down.
#pragma once
#include <memory>

#include "meshtrain/comm/communicator.h"
#include "meshtrain/nn/model.h"
#include "meshtrain/parallel/data_parallel.h"
#include "meshtrain/parallel/gradient_sync.h"
#include "meshtrain/parallel/local_sgd.h"
#include "meshtrain/parallel/parameter_server.h"

namespace meshtrain::parallel {

struct GradientSyncOptions {
  int zero_stage = 0;                   // 0 = replicated (DataParallel)
  int64_t persist_threshold = 100000;   // ZeRO-3
  DataParallelOptions dp;               // buckets, wire dtype, verify
  LocalSgdOptions local_sgd;            // enabled: LocalSgd instead of DataParallel
  ParameterServerOptions parameter_server;  // enabled: ParameterServer instead of DataParallel
  OptimizerConfig optimizer;            // the parameter server's shards step with it
  Precision precision = Precision::FP32;  // ZeRO keeps the 16-bit copy itself
  // Setup can write just a range of the parameters (ZeroOptions::own_range_init).
  bool setup_writes_ranges = false;
  // Where the model's buffers live. A device other than the CPU trains one
  // rank only for now: the collectives on device memory (NCCL, or staging
  // through pinned host memory) are the GPU distributed work's.
  Device device = Device::cpu();
};

// The model and the strategy attached to it. The model lives on the
// strategy's buffers: it is destroyed first, after the hooks are removed.
struct SyncedModel {
  std::unique_ptr<GradientSync> sync;
  std::unique_ptr<Model> model;
  SyncedModel() = default;
  SyncedModel(SyncedModel&&) = default;
  // Releases the held pair in order (detach, model, strategy), then takes `o`'s.
  SyncedModel& operator=(SyncedModel&& o) noexcept;
  ~SyncedModel();
};

// `dp_comm` invalid or of size 1: LocalGradients (zero_stage is ignored:
// one rank has nothing to shard with).
SyncedModel make_synced_model(const comm::Communicator& dp_comm,
                              std::shared_ptr<const ModelSpec> spec,
                              const GradientSyncOptions& opt);

}  // namespace meshtrain::parallel
