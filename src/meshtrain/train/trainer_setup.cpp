// TrainingRun's setup (train/training_run.h): everything before the first
// collective decision about checkpoints.
#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "meshtrain/ckpt/model_convert.h"
#include "meshtrain/nn/lora_model.h"
#include "meshtrain/nn/shard_slicing.h"
#include "meshtrain/parallel/pipeline_stages.h"
#include "meshtrain/parallel/tp_group.h"
#include "meshtrain/plan/pipeline_schedule.h"
#include "meshtrain/core/threads.h"
#include "meshtrain/train/cpu_report.h"
#include "meshtrain/train/training_run.h"

namespace meshtrain {

namespace {
parallel::PipelineLayout pipeline_layout(const TrainerOptions& opt) {
  return {plan::parse_pipe_schedule(opt.pipe_schedule), opt.pp, opt.pipe_chunks, opt.grad_accum,
          opt.pipe_stage_layers, opt.seq_len > 0 ? opt.seq_len : opt.model->seq_len()};
}

// What a world rank of a pipeline holds: its tp shard (tp innermost in the
// mesh) of its pipeline stage (pp outermost), all its chunks.
parallel::PipelineRankSpec pipeline_part(const TrainerOptions& opt, int world, int rank) {
  const parallel::MeshShape shape{world / (opt.tp * opt.pp), opt.tp, opt.pp};
  const parallel::MeshCoords at = parallel::mesh_coords(shape, rank);
  return parallel::pipeline_rank_spec(*opt.model, pipeline_layout(opt), at.pp, at.tp, opt.tp,
                                      opt.sequence_parallel);
}

std::shared_ptr<const ModelSpec> shard_spec_of(const TrainerOptions& opt, int world, int rank) {
  MT_CHECK(opt.model, "no model to train");
  MT_CHECK(opt.tp >= 1 && opt.pp >= 1 && world % (opt.tp * opt.pp) == 0, "parallel.tp = {} x "
           "parallel.pp = {} must divide the {} rank(s) of the job", opt.tp, opt.pp, world);
  MT_CHECK(opt.pp > 1 || opt.pipe_chunks == 1, "parallel.chunks = {} needs pipeline stages "
           "(parallel.pp > 1)", opt.pipe_chunks);
  if (opt.pp > 1) return pipeline_part(opt, world, rank).spec;
  if (opt.tp == 1) return opt.model;
  ModelShard shard{rank % opt.tp, opt.tp};
  shard.sequence_parallel = opt.sequence_parallel;
  return opt.model->sharded(shard);
}

int sequence_length(const TrainerOptions& opt) {
  const int T = opt.seq_len > 0 ? opt.seq_len : opt.model->seq_len();
  MT_CHECK(T <= opt.model->seq_len(), "train sequence length {} is longer than the model's "
           "context model.seq_len = {}", T, opt.model->seq_len());
  return T;
}
}  // namespace

TrainingRun::TrainingRun(const TrainerOptions& opt)
    : opt_(opt),
      shard_spec_(shard_spec_of(opt, opt.comm.valid() ? opt.comm.size() : 1,
                                opt.comm.valid() ? opt.comm.rank() : 0)),
      spec_(*shard_spec_),
      T_(sequence_length(opt)),
      world_(opt.comm.valid() ? opt.comm.size() : 1),
      rank_(opt.comm.valid() ? opt.comm.rank() : 0),
      lead_(rank_ == 0),
      // dp x tp (pipeline parallelism comes next): the dp coordinate slices
      // the data, the tp group shares each batch.
      mesh_(opt.comm, {world_ / (opt.tp * opt.pp), opt.tp, opt.pp}) {
  MT_CHECK(opt.micro_batch >= 1 && opt.grad_accum >= 1 && opt.steps >= 1,
           "micro_batch, grad_accum and steps must be >= 1");
  MT_CHECK(opt.device.is_cpu() || world_ == 1, "device = \"{}\" with {} ranks: collectives on "
           "device memory are not available yet; train on one rank (--nproc 1) or on the CPU",
           opt.device.str(), world_);
  // Refuse, before allocating, what the formulas say cannot fit the limit.
  predicted_ = predicted_for(rank_);
  check_memory_limit(memory_plan(0), opt.memory_limit_bytes);
  say(cpu_report_line());
  if (!opt.device.is_cpu())
    say(fmt::format("device: {} | {}", opt.device.str(), runtime_for(opt.device).describe()));
  if (lead_) {
    std::filesystem::create_directories(opt.run_dir);
    if (!opt.resolved_config_json.empty())
      std::ofstream(opt.run_dir + "/config.json") << opt.resolved_config_json << "\n";
  }
  // Every rank traces into its own file; layers and the communication thread
  // find the tracer through the global pointer (cleared by the destructor).
  tracer_ = opt.trace ? std::make_unique<telemetry::Tracer>(
                            telemetry::rank_trace_path(opt.run_dir, rank_), rank_)
                      : std::make_unique<telemetry::Tracer>();
  tracer_->set_thread_name("main");
  telemetry::set_global_tracer(tracer_.get());

  // The gradient synchronization strategy, chosen once (replicated buckets,
  // ZeRO 1-3, or a single rank), and the model built on its buffers.
  parallel::GradientSyncOptions so;
  so.zero_stage = opt.zero_stage;
  so.persist_threshold = opt.zero_persist_threshold;
  so.dp = opt.dp;
  so.local_sgd = opt.local_sgd;
  so.parameter_server = opt.parameter_server;
  so.optimizer = opt.optimizer;
  so.precision = opt.precision;
  so.device = opt.device;
  so.setup_writes_ranges = setup_writes_ranges(opt.init_from, spec_);
  // Every rank must take the same setup path (the broadcast it skips is
  // collective): a file one rank cannot read by range makes all read it whole.
  if (comm::Communicator* world = world_comm())
    so.setup_writes_ranges =
        world->allreduce_scalar(int64_t{so.setup_writes_ranges}, comm::ReduceOp::Min) == 1;
  synced_ = parallel::make_synced_model(mesh_.comm(parallel::Axis::DP), shard_spec_, so);
  model_ = synced_.model.get();
  if (opt.sync_bn && spec_.uses_replica_group() && mesh_.size(parallel::Axis::DP) > 1) {
    const comm::Communicator& dp = mesh_.comm(parallel::Axis::DP);
    replica_group_ = parallel::make_tp_group(dp.split(0, dp.rank()));
    model_->set_replica_group(replica_group_);
    say(fmt::format("synchronized batch norm over the {} data-parallel ranks",
                    mesh_.size(parallel::Axis::DP)));
  } else if (opt.sync_bn && !spec_.uses_replica_group()) {
    say(fmt::format("model.sync_bn: {} has no batch norm; ignored", spec_.family()));
  }
  if (opt.tp > 1) {
    tp_group_ = parallel::make_tp_group(mesh_.comm(parallel::Axis::TP));
    model_->set_tensor_parallel_group(tp_group_);
    say(fmt::format("mesh: dp {} x tp {}{} (world rank r holds tp shard r % {}{}){}; tp collectives "
                    "over {}", mesh_.size(parallel::Axis::DP), opt.tp,
                    opt.pp > 1 ? fmt::format(" x pp {}", opt.pp) : "", opt.tp,
                    opt.pp > 1 ? fmt::format(" of stage r / {}", world_ / opt.pp) : "",
                    opt.sequence_parallel ? ", sequence parallel" : "",
                    mesh_.comm(parallel::Axis::TP).transport()));
  }
  if (opt.tp > 1 || opt.pp > 1) {
    // Checkpoints in the logical layout from every (stage, tp) shard.
    std::vector<std::shared_ptr<const ModelSpec>> shards;
    for (int s = 0; s < opt.pp; ++s)
      for (int t = 0; t < opt.tp; ++t)
        shards.push_back(shard_spec_of(opt, world_, parallel::mesh_rank(mesh_.shape(), {0, t, s})));
    mp_ckpt_ = std::make_unique<ModelParallelCheckpoint>(opt.model, shards, mesh_);
  }
  sync_ = synced_.sync.get();
  comm_ = sync_->comm();
  model_->set_recompute(opt.recompute);
  mixed_ = std::make_unique<MixedPrecision>(*model_, MixedPrecisionOptions{opt.precision, opt.loss_scale});
  if (spec_.frozen_base()) {
    // LoRA: the adapters from the seed (B = 0: the run starts from the base's
    // function), the frozen base from init_from when there is one: each of
    // an interleaved rank's chunks holds its own stage of it.
    model_->init_weights(opt.seed);
    std::string from;
    for (Model* chunk : model_->pipeline_chunks())
      if (!opt.init_from.empty())
        from = opt.pp > 1 ? load_shard(*opt.model->frozen_base(), *chunk->frozen_base(), std::nullopt)
                          : ckpt::load_init_weights(opt.init_from, *chunk->frozen_base());
    if (!from.empty()) say(fmt::format("loaded the frozen base from {}", from));
    model_->weights_loaded();
    if (model_->pipeline_chunks()[0]->frozen_base()->f32_matrices_released())
      say(fmt::format("LoRA: the frozen base's matrices are held in {} only (lora.base_dtype)",
                      precision_name(opt.precision)));
  } else if (opt.init_from.empty()) {
    sync_->init_weights(*model_, opt.seed);  // ZeRO: perhaps only this rank's own range
  } else if (opt.tp > 1 || opt.pp > 1) {
    say(fmt::format("loaded weights from {}", load_shard(*opt.model, *model_, sync_->setup_range())));
  } else if (const auto range = sync_->setup_range()) {
    // ZeRO keeping a range reads only its own part of the file.
    say(fmt::format("loaded weights from {} (each rank its own range)",
                    ckpt::load_init_weights(opt.init_from, *model_, *range)));
  } else {
    // A model file, or a checkpoint directory (its parameters; fresh optimizer).
    say(fmt::format("loaded weights from {}", ckpt::load_init_weights(opt.init_from, *model_)));
  }
  // ZeRO: every rank starts from rank 0's weights (broadcast, unless each
  // wrote its own range above); stage 3 then keeps only its own range before
  // the optimizer state is allocated (parallel/zero.h), so setup never holds
  // both in full.
  sync_->before_resume();
  // Token ids are checked against the vocabulary by the model's forward on every batch.
  stepper_ = std::make_unique<TrainStep>(*model_, *sync_, opt.optimizer, opt.schedule, opt.clip);
  stepper_->set_slow_rank(SlowRank::from_env(rank_));
  stepper_->set_mixed_precision(mixed_.get());
  if (opt.tp > 1) stepper_->set_tensor_parallel(&mesh_.comm(parallel::Axis::TP), tp_group_.get());
  if (opt.pp > 1) setup_pipeline();
  // Effective batch: micro-batch x data-parallel ranks x accumulation
  // sequences per step (a tp group shares its batch).
  global_batch_ = static_cast<int64_t>(opt.micro_batch) * mesh_.size(parallel::Axis::DP) * opt.grad_accum;
  tokens_per_step_ = global_batch_ * T_;
}

TrainingRun::~TrainingRun() = default;  // clear_tracer_ drops the global tracer pointer

comm::Communicator* TrainingRun::world_comm() const {
  return world_ > 1 ? const_cast<comm::Communicator*>(&mesh_.world()) : nullptr;
}

void TrainingRun::setup_pipeline() {
  const int64_t pp = opt_.pp;
  // Every stage as this rank's tp shard of it (the specs of this rank's pp
  // group, the ranks of one (dp, tp) coordinate): activations are whole on
  // every tp rank, so each sends to the same tp rank of the next stage.
  stage_specs_ = parallel::pipeline_virtual_stage_specs(*opt_.model, pipeline_layout(opt_),
                                                        mesh_.rank(parallel::Axis::TP), opt_.tp,
                                                        opt_.sequence_parallel);
  comm::Communicator& group = const_cast<comm::Communicator&>(mesh_.comm(parallel::Axis::PP));
  const parallel::PipelineLayout layout = pipeline_layout(opt_);
  pipe_ = std::make_unique<parallel::PipelineExecutor>(group, stage_specs_, model_->pipeline_chunks(),
                                                       layout.schedule, opt_.grad_accum);
  if (sync_->sharded()) {
    // ZeRO: the tied parameters' sums pair the two stages' own ranges.
    const parallel::MeshShape shape = mesh_.shape();
    const int tp_rank = mesh_.rank(parallel::Axis::TP);
    auto world_rank = [shape, tp_rank](int dp, int64_t stage) {
      return parallel::mesh_rank(shape, {dp, tp_rank, static_cast<int>(stage)});
    };
    std::vector<std::shared_ptr<const ModelSpec>> rank_specs;
    for (int64_t s = 0; s < pp; ++s) rank_specs.push_back(shard_spec_of(opt_, world_, world_rank(0, s)));
    pipe_->set_sharded_gradients({[this] { return sync_->gradients(); }, mesh_.rank(parallel::Axis::DP),
                                  mesh_.size(parallel::Axis::DP), mesh_.world(), world_rank,
                                  std::move(rank_specs)});
  }
  stepper_->set_pipeline(pipe_.get(), &group);
  // Rank 0's layers: one range per chunk (virtual stage c x pp).
  std::string layers, counts;
  for (int64_t c = 0; c < layout.chunks; ++c) {
    const ModelShard s = stage_specs_[static_cast<size_t>(c * pp)]->shard();
    layers += fmt::format("{}[{}, {})", c ? ", " : "", s.layer_begin, s.layer_end);
  }
  for (size_t vs = 0; vs < stage_specs_.size(); ++vs) {
    const ModelShard s = stage_specs_[vs]->shard();
    counts += fmt::format("{}{}", vs ? " + " : "", s.layer_end - s.layer_begin);
  }
  const ModelSpec::StageCosts cost = opt_.model->stage_costs(T_);
  say(fmt::format("pipeline stages: {} layers{}", counts,
                  !layout.stage_layers.empty() ? " (parallel.stage_layers)"
                  : cost.layer > 0 ? fmt::format(" (balanced by model FLOPs; the head costs {:.2f} "
                                                 "layers)", cost.last / cost.layer)
                                   : ""));
  say(fmt::format("pipeline: {} stages{}, schedule {} over {} micro-batch(es) (bubble over the "
                  "compute by {}); rank 0 holds layers {} of {}", pp,
                  layout.chunks > 1 ? fmt::format(" x {} chunks", layout.chunks) : "",
                  opt_.pipe_schedule, opt_.grad_accum,
                  plan::expected_bubble(layout.schedule, pp, opt_.grad_accum, layout.chunks),
                  layers, opt_.model->num_layers()));
}

std::string TrainingRun::load_shard(const ModelSpec& logical, Model& target,
                                    std::optional<ElemSpan> own) const {
  const int tp_rank = mesh_.rank(parallel::Axis::TP);
  const ModelSpec& shard = target.spec();
  if (ckpt::can_load_range(opt_.init_from, logical)) {
    // Only this shard's slices of each tensor (one tensor staged at a time);
    // under ZeRO keeping a range, only those inside its own range.
    const BufferWindow window = BufferWindow::shard(
        target.param_buffer(), own.value_or(ElemSpan{0, shard.num_params()}), logical.layout(),
        shard.layout(), tp_rank);
    return fmt::format("{} (this shard's slices{})", ckpt::load_init_weights(opt_.init_from, logical, window),
                       own ? ", each rank its own range" : "");
  }
  // A file that loads whole (llm.c): read once into a whole model on this
  // rank, then the shard takes its slices.
  auto whole = logical.build();
  const std::string from = ckpt::load_init_weights(opt_.init_from, *whole);
  copy_logical_to_shard(logical.layout(), shard.layout(), tp_rank, whole->param_buffer().data<float>(),
                        target.param_buffer().data<float>());
  return from;
}

Tensor TrainingRun::rank_frozen_base_f32() const {
  const std::vector<Model*> chunks = model_->pipeline_chunks();
  if (chunks.size() == 1) return frozen_base_f32(*chunks[0]->frozen_base());
  // An interleaved rank: each chunk's base placed by name in the layout of
  // the chunks' bases together (ChunkedSpec::frozen_base).
  const ParamLayout& rank = spec_.frozen_base()->layout();
  std::map<std::string, int64_t> at;
  for (const ParamInfo& p : rank.params) at[p.name] = p.begin;
  Tensor out = Tensor::zeros({rank.numel}, DType::F32, MemCategory::Other);
  for (Model* chunk : chunks) {
    const Model& base = *chunk->frozen_base();
    const Tensor part = frozen_base_f32(base);
    for (const ParamInfo& p : base.spec().layout().params)
      std::copy_n(part.data<float>() + p.begin, p.numel(), out.data<float>() + at.at(p.name));
  }
  return out;
}

Tensor TrainingRun::gather_pipeline_parameters(bool frozen_base) const {
  // World rank 0 assembles the model from the tp x pp ranks of data-parallel
  // replica 0, each shard of each stage placed by name (and tp slice).
  comm::Communicator& world = const_cast<comm::Communicator&>(mesh_.world());
  const parallel::MeshShape shape = mesh_.shape();
  const parallel::MeshCoords me = parallel::mesh_coords(shape, rank_);
  if (me.dp != 0) return Tensor();
  const Tensor mine = frozen_base ? rank_frozen_base_f32() : model_->param_buffer();
  if (rank_ != 0) {
    world.send(mine.raw(), static_cast<size_t>(mine.numel()), DType::F32, 0).wait();
    return Tensor();
  }
  const ModelSpec& logical = frozen_base ? *opt_.model->frozen_base() : *opt_.model;
  Tensor whole = Tensor::zeros({logical.num_params()}, DType::F32, MemCategory::Other);
  for (int s = 0; s < opt_.pp; ++s)
    for (int t = 0; t < opt_.tp; ++t) {
      const int from = parallel::mesh_rank(shape, {0, t, s});
      const auto spec = shard_spec_of(opt_, world_, from);
      const ModelSpec& stage = frozen_base ? *spec->frozen_base() : *spec;
      Tensor part = from == 0 ? mine : Tensor::zeros({stage.num_params()}, DType::F32, MemCategory::Other);
      if (from != 0) world.recv(part.raw(), static_cast<size_t>(part.numel()), DType::F32, from).wait();
      // By name into the logical layout (a tied parameter: the same values twice).
      for (const ShardRun& r : shard_runs(logical.layout(), stage.layout(), t))
        std::copy_n(part.data<float>() + r.shard, r.count, whole.data<float>() + r.logical);
    }
  return whole;
}

float TrainingRun::pipeline_forward(const MicroBatch& mb) {
  const float loss = pipe_->forward_only(mb);
  comm::Communicator& c = const_cast<comm::Communicator&>(mesh_.comm(parallel::Axis::PP));
  const bool last = c.rank() + 1 == c.size();
  return static_cast<float>(c.allreduce_scalar(last ? static_cast<double>(loss) : 0.0));
}

Tensor TrainingRun::logical_parameters() const {
  if (pipe_) return gather_pipeline_parameters();
  if (const Tensor& p = model_->param_buffer(); !p.device().is_cpu()) {
    // Saving and sampling read the parameters on the host.
    Tensor host = Tensor::zeros({p.numel()}, DType::F32, MemCategory::Other);
    host.copy_from(p);
    return host;
  }
  if (!mp_ckpt_) return model_->param_buffer();
  return mp_ckpt_->gather_whole(model_->param_buffer());
}

Tensor TrainingRun::product_parameters() const {
  // A merged (LoRA) or assembled (tp) copy of the whole model is about to be
  // made: the activations make room for it (the next forward allocates them).
  if (spec_.frozen_base() || mp_ckpt_) model_->release_activations();
  const Tensor whole = logical_parameters();
  if (!spec_.frozen_base()) return whole;
  if (!pipe_) return lead_ ? model_->merged_parameters(whole) : Tensor();  // only rank 0 saves and samples
  // Pipeline stages: the frozen base's stages assembled too, then merged whole.
  Tensor merged = gather_pipeline_parameters(/*frozen_base=*/true);
  if (lead_) merge_lora(dynamic_cast<const LoraSpec&>(*opt_.model), whole.data<float>(), merged.data<float>());
  return merged;
}

const ModelSpec& TrainingRun::product_spec() const {
  return opt_.model->frozen_base() ? *opt_.model->frozen_base() : *opt_.model;
}

void TrainingRun::say(const std::string& line) const {
  if (lead_) fmt::print("{}\n", line);
}

MemoryPrediction TrainingRun::predicted_for(int world_rank) const {
  if (opt_.pp == 1)  // every tp shard is the same size
    return predict_training_memory(spec_, opt_.micro_batch, T_, thread_count(), opt_.recompute,
                                   opt_.precision, opt_.device, 1, false,
                                   opt_.optimizer.states_per_param());
  const parallel::PipelineRankSpec part = pipeline_part(opt_, world_, world_rank);
  return predict_training_memory(*part.spec, opt_.micro_batch, T_, thread_count(), opt_.recompute,
                                 opt_.precision, opt_.device, part.activation_slots,
                                 part.split_backward, opt_.optimizer.states_per_param());
}

MemoryPlan TrainingRun::memory_plan(int rank) const {
  MemoryPlan plan;
  // The rank's own shard (under tp alone every shard is the same size).
  plan.model = opt_.pp == 1 ? shard_spec_ : shard_spec_of(opt_, world_, rank);
  plan.B = opt_.micro_batch;
  plan.T = T_;
  plan.threads = thread_count();
  const int dp = mesh_.size(parallel::Axis::DP);
  plan.world = dp;
  plan.rank = parallel::mesh_coords(mesh_.shape(), rank).dp;
  plan.zero_stage = dp > 1 ? opt_.zero_stage : 0;
  plan.persist_threshold = opt_.zero_persist_threshold;
  plan.bytes = opt_.state_bytes;
  plan.bytes.o = 4 * opt_.optimizer.states_per_param();  // f32 state values per parameter
  plan.optimizer = opt_.optimizer;
  // Local SGD's anchor (and outer momentum), f32 per parameter (parallel/local_sgd.h).
  if (opt_.local_sgd.enabled() && dp > 1) plan.bytes.o += 4 * (opt_.local_sgd.outer_momentum > 0 ? 2 : 1);
  // The parameter server's optimizer state is in its shared shards, outside
  // this process's allocator (the run says how large they are).
  if (opt_.parameter_server.enabled && dp > 1) plan.bytes.o = 0;
  // Mixed precision: the model's 16-bit compute copy beside its f32 master
  // parameters (nn/model.h), 2 more bytes per parameter.
  // (A LoRA model has none of its own; ZeRO keeps one of the adapters.)
  if (is_mixed(opt_.precision) && (plan.zero_stage > 0 || !spec_.frozen_base())) plan.bytes.p_full = 2;
  if (opt_.dp.grad_dtype == DType::BF16) plan.grad_wire = 2;  // comm.grad_dtype = bf16
  // Error feedback's f32 residual per parameter (parallel/error_feedback.h).
  if (opt_.dp.compression.compressing() && opt_.dp.compression.error_feedback) plan.grad_wire = 4;
  plan.setup_own_range = setup_from_own_range(plan.zero_stage, opt_.precision, opt_.init_from, *plan.model);
  plan.setup_staging = file_staging_bytes(opt_.init_from, *opt_.model);
  plan.base = rank == rank_ ? predicted_ : predicted_for(rank);
  plan.split_backward = opt_.pp > 1 && pipeline_part(opt_, world_, rank).split_backward;
  // The copy product_parameters() makes for saving and sampling.
  if (const auto base = spec_.frozen_base(); base && rank == 0) {
    plan.product_copy = 4 * base->num_params();
    plan.product_copy_what = "the f32 model with the LoRA adapters merged into the frozen base";
  } else if (opt_.tp > 1) {
    plan.product_copy = 2 * 4 * opt_.model->num_params();  // allgathered shards + assembled model
    plan.product_copy_what = "the tp shards allgathered and assembled into the whole f32 model";
  }
  return plan;
}

}  // namespace meshtrain
