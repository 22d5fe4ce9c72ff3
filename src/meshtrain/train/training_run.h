// One training run in four parts a reader can find by name (run_trainer in
// trainer.cpp calls them in order):
//   setup     trainer_setup.cpp    checks, mesh, tracer, the gradient-sync
//                                  strategy and the model on its buffers,
//                                  precision, initial weights, the step
//   resume    trainer_resume.cpp   the checkpoint to continue from (collective),
//                                  every rank on the same weights, the data
//                                  loaders at the resumed position, what the
//                                  run is (printed once)
//   loop      training_loop.cpp    steps: data, TrainStep, telemetry, the time
//                                  budget, evaluation, checkpoints, samples
//   finish    trainer_finish.cpp   trace merge, per-rank memory peaks against
//                                  the prediction, the final model file
// Internal to train/: the state the parts share.
#pragma once
#include <memory>
#include <optional>
#include <string>

#include "meshtrain/core/device_runtime.h"
#include "meshtrain/data/batch_source.h"
#include "meshtrain/parallel/make_gradient_sync.h"
#include "meshtrain/parallel/mesh.h"
#include "meshtrain/parallel/tp_group.h"
#include "meshtrain/telemetry/metrics_log.h"
#include "meshtrain/telemetry/progress.h"
#include "meshtrain/telemetry/run_summary.h"
#include "meshtrain/telemetry/step_timer.h"
#include "meshtrain/telemetry/tensorboard_writer.h"
#include "meshtrain/telemetry/trace_writer.h"
#include "meshtrain/train/memory_model.h"
#include "meshtrain/train/memory_report.h"
#include "meshtrain/train/mixed_precision.h"
#include "meshtrain/train/train_step.h"
#include "meshtrain/train/model_parallel_checkpoint.h"
#include "meshtrain/train/trainer.h"

namespace meshtrain {

class TrainingRun {
 public:
  explicit TrainingRun(const TrainerOptions& opt);  // setup
  ~TrainingRun();
  void resume();
  void loop();
  // loop() for an asynchronous strategy (async_training_loop.cpp).
  void async_loop();
  // Rank 0's record of a step to the metrics file, TensorBoard, the summary
  // and the progress display (both loops).
  void publish_step(telemetry::StepTelemetry& t, const nlohmann::json& rec, MetricsLog& metrics,
                    telemetry::TensorBoardWriter& tb, ProgressDisplay& progress);
  // A step's telemetry from its stats: the fields both loops fill alike.
  telemetry::StepTelemetry step_record(int64_t step, const StepStats& st, double data_s,
                                       double step_s) const;
  TrainerSummary finish();

 private:
  // Prints on rank 0 only (the others stay quiet unless they fail).
  void say(const std::string& line) const;
  // The memory formulas' inputs for `rank` (memory_report.h).
  MemoryPlan memory_plan(int rank) const;
  // The allocator accounting of the device training runs on (the formulas'
  // categories live there: host memory on the CPU, the GPU's otherwise).
  DeviceMemStats memory_stats() const { return runtime_for(opt_.device).memory_stats(opt_.device); }
  void open_data();
  void describe() const;
  // With offload.optimizer_state: the file, its transfers and the waits (rank 0's).
  void print_offload_report(const RankMemory& predicted);

  // World communicator when there are several ranks (else null).
  comm::Communicator* world_comm() const;
  // The logical model's parameters (tensor-parallel shards assembled); call
  // on every rank after gather_full_parameters, read on rank 0.
  Tensor logical_parameters() const;
  // What the run saves and samples from: the logical parameters, or under
  // LoRA the frozen base with the adapters merged, in product_spec()'s layout.
  Tensor product_parameters() const;
  const ModelSpec& product_spec() const;

  const TrainerOptions& opt_;
  // This rank's part of the model: the whole model, or its tp shard.
  std::shared_ptr<const ModelSpec> shard_spec_;
  const ModelSpec& spec_;
  int T_ = 0, world_ = 1, rank_ = 0;
  bool lead_ = true;  // prints, writes metrics, saves the model
  parallel::Mesh mesh_;
  // Tensor parallelism: checkpoints in the logical layout (null at tp = 1).
  std::unique_ptr<ModelParallelCheckpoint> mp_ckpt_;
  std::shared_ptr<parallel::CommTensorParallelGroup> tp_group_;  // times the tp collectives
  // Synchronized batch norm's collectives (opt.sync_bn): a communicator of
  // the dp ranks of its own, so they never queue behind gradient buckets.
  std::shared_ptr<parallel::CommTensorParallelGroup> replica_group_;
  std::unique_ptr<telemetry::Tracer> tracer_;
  // Clears the global tracer pointer when the run goes, also when setup
  // throws (a constructor that throws runs no destructor of its own class,
  // but its members' destructors do run).
  struct ClearGlobalTracer {
    ~ClearGlobalTracer() { telemetry::set_global_tracer(nullptr); }
  } clear_tracer_;
  parallel::SyncedModel synced_;
  Model* model_ = nullptr;
  parallel::GradientSync* sync_ = nullptr;
  comm::Communicator* comm_ = nullptr;  // the data-parallel group; null with one rank
  std::unique_ptr<MixedPrecision> mixed_;
  std::unique_ptr<TrainStep> stepper_;
  // Pipeline parallelism: this stage's executor and every stage's spec.
  std::unique_ptr<parallel::PipelineExecutor> pipe_;
  std::vector<std::shared_ptr<const ModelSpec>> stage_specs_;
  void setup_pipeline();
  // The whole model's parameters (or, with frozen_base, LoRA's frozen base's
  // in f32) assembled on world rank 0 from data-parallel replica 0's tp x pp
  // ranks (collective over them); empty elsewhere.
  Tensor gather_pipeline_parameters(bool frozen_base = false) const;
  // LoRA: this rank's frozen base in f32, in spec_.frozen_base()'s layout
  // (an interleaved rank's chunks' bases together).
  Tensor rank_frozen_base_f32() const;
  // init_from into `target`, this rank's (tp, pp) shard of `logical` (the
  // model, or LoRA's frozen base): only its slices where the file allows
  // (within `own` under ZeRO keeping a range), else read whole and sliced.
  // Returns what was read, for the log.
  std::string load_shard(const ModelSpec& logical, Model& target, std::optional<ElemSpan> own) const;
  // One micro-batch's forward through the pipeline (collective over pp):
  // the loss, on every stage.
  float pipeline_forward(const MicroBatch& mb);
  int64_t global_batch_ = 0, tokens_per_step_ = 0;
  MemoryPrediction predicted_;  // this rank's
  // A world rank's activations and workspace by the formulas: its shard's,
  // times the activation slots its pipeline stage holds.
  MemoryPrediction predicted_for(int world_rank) const;
  // resume()
  std::optional<ResumePoint> resumed_;
  std::optional<ckpt::ElemRange> own_params_;
  int64_t start_step_ = 0;
  std::unique_ptr<data::BatchSource> train_, val_;
  // loop()
  telemetry::RunSummary summary_;
  ProgressState progress_state_;
  TrainerSummary result_;
  int64_t total_steps_ = 0, setup_peak_ = 0;
  // checkpoint.memory_every: this rank's node's in-memory copies at the end.
  int64_t memory_copies_bytes_ = 0;
  int memory_copies_node_ranks_ = 1;  // the ranks of this rank's node
  // The copies a rank's node keeps for it: its shard (its 1/dp of the f32
  // parameters and optimizer state) and a buddy's, two steps each.
  double predicted_memory_copies_per_rank() const;
  double t_start_ = 0;
};

}  // namespace meshtrain
