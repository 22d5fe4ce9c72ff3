// `meshtrain train --config FILE [--set key=value]... [--nproc N]`
// With --nproc N (outside a job) it launches N ranks of itself through the
// local launcher; each rank, and each rank of an `mpirun` job, trains its
// data-parallel replica (train/trainer.h). --max-restarts makes the launch
// elastic (launch/elastic.h): a failed job starts again and resumes from its
// latest checkpoint.
#include <fmt/format.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>

#include "commands.h"
#include "meshtrain/ckpt/checkpoint_dir.h"
#include "meshtrain/ckpt/model_convert.h"
#include "meshtrain/config/config_loader.h"
#include "meshtrain/comm/world.h"
#include "meshtrain/core/device_runtime.h"
#include "meshtrain/core/threads.h"
#include "meshtrain/kernels/cpu/sgemm_backend.h"
#include "meshtrain/launch/elastic.h"
#include "meshtrain/launch/heartbeat.h"
#include "meshtrain/parallel/pipeline_stages.h"
#include "meshtrain/plan/pipeline_schedule.h"
#include "meshtrain/train/memory_model.h"
#include "meshtrain/train/memory_report.h"
#include "meshtrain/train/model_from_config.h"
#include "meshtrain/train/trainer.h"
#include "recompute_option.h"

namespace meshtrain::cli {

namespace {
struct TrainArgs {
  std::string config;
  std::vector<std::string> sets;
  int nproc = 0;  // 0: this process is the whole job (or one rank of an mpirun/launched job)
  bool trace = false;  // --trace: same as telemetry.trace = true
  bool check = false;  // --check: validate, print the resolved configuration as JSON, stop
  launch::ElasticOptions elastic;  // --max-restarts, --min-nproc, --heartbeat-timeout, ...
};

// A GPU is named in three steps: whether this build has the CUDA backend,
// whether the GPU is visible, and (for now) that training does not yet place a
// model on it.
// A device other than the CPU: built into this binary, visible, and asked
// for what trains there today (one rank, no LoRA).
void check_device(const TrainConfig& c, int ranks) {
  const Device d = parse_device(c.device);
  if (d.is_cpu()) return;
  const int visible = runtime_for(d).device_count();  // Error without the backend
  if (d.index >= visible)
    throw Error(fmt::format("device = \"{}\": {} CUDA GPU(s) visible to this process{}", d.str(),
                            visible, visible == 0 ? " (check nvidia-smi and CUDA_VISIBLE_DEVICES)" : ""));
  if (ranks > 1)
    throw Error(fmt::format("device = \"{}\" with {} ranks: collectives on device memory are not "
                            "available yet; train on one rank (--nproc 1) or on the CPU", d.str(), ranks));
  if (c.lora.rank > 0)
    throw Error(fmt::format("device = \"{}\" with lora.rank = {}: LoRA keeps its frozen base in host "
                            "memory and trains on the CPU for now", d.str(), c.lora.rank));
}

// Settings whose machinery lands in later versions are refused, not ignored.
void refuse_unavailable(const TrainConfig& c) {
  auto refuse = [](bool cond, const std::string& what) {
    if (cond) throw Error(what + " is not available in this build yet; remove the setting "
                                 "to train");
  };
  // What pipeline parallelism does not compose with yet.
  const bool pp = c.parallel.pp > 1;
  refuse(pp && c.device != "cpu", fmt::format("parallel.pp = {} on device \"{}\"", c.parallel.pp, c.device));
  refuse(c.comm.transport == "nccl" || c.comm.transport == "tcp",
         fmt::format("comm.transport = \"{}\" (shm and mpi are)", c.comm.transport));
}

// parallel.tp x parallel.pp must divide the ranks the job has; parallel.dp
// must be the rest ("auto" = all of it).
void check_dp(const TrainConfig& c, int world) {
  const int tp = c.parallel.tp, pp = c.parallel.pp, mp = tp * pp;
  const std::string model_parallel =
      pp == 1 ? fmt::format("parallel.tp = {}", tp)
      : tp == 1 ? fmt::format("parallel.pp = {}", pp)
                : fmt::format("parallel.tp = {} x parallel.pp = {}", tp, pp);
  if (pp > 1) {  // the planner's wording: stages need their ranks
    MT_CHECK(world % mp == 0, "{} needs a multiple of {} rank(s) but the job has {}; run with "
             "--nproc {} (or mpirun -np {})", model_parallel, mp, world, mp, mp);
  } else {
    MT_CHECK(tp >= 1 && world % tp == 0, "parallel.tp = {} must divide the {} rank(s) of the job "
             "(run with --nproc a multiple of {})", tp, world, tp);
  }
  const int dp = world / mp;
  if (c.parallel.dp == 0 || c.parallel.dp == dp) return;
  if (mp == 1)
    throw Error(fmt::format("parallel.dp = {} but the job has {} rank(s); run with --nproc {} (or "
                            "mpirun -np {}), or set parallel.dp = \"auto\"", c.parallel.dp, world,
                            c.parallel.dp, c.parallel.dp));
  const int need = c.parallel.dp * mp;
  throw Error(fmt::format("{} x parallel.dp = {} needs {} rank(s) but the job has {}; run with "
                          "--nproc {} (or mpirun -np {}), or set parallel.dp = \"auto\"",
                          model_parallel, c.parallel.dp, need, world, need, need));
}

bool inside_job(const comm::WorldInfo& w) { return w.source != "none"; }

parallel::PipelineLayout pipeline_layout_of(const TrainConfig& c, const ModelSpec& spec) {
  return {plan::parse_pipe_schedule(c.parallel.schedule), c.parallel.pp, c.parallel.chunks,
          c.train.grad_accum, parallel::parse_stage_layers(c.parallel.stage_layers, "parallel.stage_layers"),
          spec.seq_len()};
}

// memory.limit_mb against the formulas (train/memory_report.h) for `ranks`
// ranks, with the threads each rank would get.
void check_memory_limit_of(const TrainConfig& c, std::shared_ptr<const ModelSpec> spec, int ranks) {
  const long cores = std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));
  const int threads = c.train.threads > 0 ? c.train.threads
                                          : static_cast<int>(std::max(1L, cores / std::max(1, ranks)));
  const int T = spec->seq_len();
  const int tp = c.parallel.tp, pp = c.parallel.pp, dp = ranks / (tp * pp);
  const Precision precision = precision_from_name(c.precision);
  // Every pipeline stage (tp shards are equal): its layers and the
  // micro-batches of activations its schedule holds.
  const parallel::PipelineLayout layout = pipeline_layout_of(c, *spec);
  const int64_t staging = file_staging_bytes(c.init_from, *spec);  // read once, not per stage
  for (int64_t s = 0; s < pp; ++s) {
    MemoryPlan need;
    parallel::PipelineRankSpec part{spec, 1};
    if (pp > 1) {
      part = parallel::pipeline_rank_spec(*spec, layout, s, 0, tp, c.parallel.sequence_parallel);
    } else if (tp > 1 || c.parallel.sequence_parallel) {
      ModelShard shard{0, tp};
      shard.sequence_parallel = c.parallel.sequence_parallel;
      part.spec = spec->sharded(shard);
    }
    need.setup_staging = staging;
    need.model = part.spec;
    need.B = c.train.micro_batch;
    need.T = T;
    need.threads = threads;
    need.world = dp;
    need.zero_stage = dp > 1 ? c.zero.stage : 0;
    need.persist_threshold = c.zero.persist_threshold;
    OptimizerConfig optimizer;
    optimizer.type = c.train.optimizer;
    need.bytes.o = 4 * optimizer.states_per_param();  // f32 state values per parameter
    if (c.parallel.local_sgd.sync_every > 0)  // the anchor (and outer momentum), parallel/local_sgd.h
      need.bytes.o += 4 * (c.parallel.local_sgd.outer_momentum > 0 ? 2 : 1);
    // The parameter server's shard in shared memory: 1/dp of the parameters
    // and optimizer state, and a push slot per worker (1/dp of the gradients each).
    if (c.parallel.parameter_server.enabled && dp > 1)
      need.bytes.o = (4 * (1 + optimizer.states_per_param()) + dp - 1) / dp + 4;
    need.base = predict_training_memory(*need.model, need.B, T, threads,
                                        recompute_from_config(c.recompute), precision,
                                        Device::cpu(), part.activation_slots, part.split_backward,
                                        optimizer.states_per_param());
    if (is_mixed(precision)) need.bytes.p_full = 2;  // the 16-bit compute copy (as the trainer)
    if (c.comm.grad_dtype == "bf16") need.grad_wire = 2;
    // Error feedback keeps an f32 residual per parameter (the factors and
    // messages are small beside it).
    if (c.comm.compression.type != "none" && c.comm.compression.error_feedback) need.grad_wire = 4;
    need.setup_own_range = setup_from_own_range(need.zero_stage, precision, c.init_from, *need.model);
    check_memory_limit(need, c.memory.limit_mb * 1e6);
  }
}

// Starts `nproc` ranks of this binary with the same arguments (minus --nproc);
// restarts (resuming from the latest checkpoint) up to --max-restarts times.
void launch_ranks(const TrainArgs& a, const TrainConfig& c) {
  launch::ElasticOptions eo = a.elastic;
  if (eo.restart_log.empty() && eo.max_restarts > 0) eo.restart_log = c.telemetry.dir + "/restarts.jsonl";
  launch::LaunchOptions& lo = eo.launch;
  lo.nproc = std::max(1, a.nproc);
  lo.prefix_output = false;  // only rank 0 prints; errors name their rank
  char self[4096];
  const ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
  lo.command = {len > 0 ? std::string(self, static_cast<size_t>(len)) : "/proc/self/exe", "train"};
  if (!a.config.empty()) lo.command.insert(lo.command.end(), {"--config", a.config});
  for (const auto& s : a.sets) lo.command.insert(lo.command.end(), {"--set", s});
  if (a.trace) lo.command.push_back("--trace");
  const launch::ElasticResult r = launch::run_elastic(eo);
  if (r.exit_code != 0) throw Error(fmt::format("training failed: {}", r.message));
}

// A restarted attempt of an elastic job continues from the run's newest
// checkpoint, whatever checkpoint.resume said for the first start.
void resume_on_restart(TrainConfig& c, bool lead) {
  if (launch::restart_count() == 0 || c.checkpoint.resume == "auto" || c.checkpoint.dir.empty()) return;
  if (c.checkpoint.resume != "never" && !ckpt::find_latest_complete(c.checkpoint.dir, nullptr)) return;
  if (lead)
    fmt::print("restart {} of an elastic job: checkpoint.resume = \"auto\" (was \"{}\")\n",
               launch::restart_count(), c.checkpoint.resume);
  c.checkpoint.resume = "auto";
}

// deterministic: every reduction runs one fixed algorithm, whatever a cost
// model or a calibration file would pick (their choice may differ between a
// run and its restart), and never the MPI library's own (unspecified order).
void pin_deterministic_algorithms(comm::CommOptions& co, const comm::WorldInfo& world) {
  const bool shm = co.transport == "shm" || (co.transport == "auto" && world.source == "meshtrain");
  for (comm::CollOp op : {comm::CollOp::Allreduce, comm::CollOp::ReduceScatter, comm::CollOp::Reduce}) {
    std::string& pin = co.algorithm[static_cast<size_t>(op)];
    if (pin.empty() || pin == "auto" || pin == "mpi") pin = shm ? "direct" : "ring";
  }
}

void run_train(const TrainArgs& a) {
  const comm::WorldInfo world = comm::world_from_env();
  if (a.nproc < 0) throw UsageError("--nproc must be >= 1");
  const bool launching = (a.nproc > 1 || a.elastic.max_restarts > 0) && !inside_job(world);
  if (a.nproc > 0 && inside_job(world) && a.nproc != world.size)
    throw UsageError(fmt::format("--nproc {} inside a job of {} ranks", a.nproc, world.size));
  const int ranks = launching ? std::max(1, a.nproc) : world.size;
  const bool lead = world.rank == 0;

  std::vector<std::string> sets = a.sets;
  if (a.trace) sets.push_back("telemetry.trace=true");
  TrainConfig c = load_config(a.config, sets);
  resume_on_restart(c, lead);
  if (lead && !launching && !a.check) fmt::print("resolved configuration:\n{}\n", to_string(c));
  refuse_unavailable(c);
  check_dp(c, ranks);
  MT_CHECK(c.parallel.pp > 1 || c.parallel.stage_layers.empty(), "parallel.stage_layers = \"{}\" "
           "needs pipeline stages (parallel.pp > 1)", c.parallel.stage_layers);
  check_device(c, ranks);
  MT_CHECK(!c.data.train.empty(), "data.train is empty: give a glob of training shards (make "
           "them with `meshtrain data prepare` or `meshtrain data synth`)");
  if (launching || a.check) {
    // Fail here, once, rather than in every rank: the model shape and the
    // memory limit (rank 0 holds the largest ZeRO shard).
    const std::shared_ptr<const ModelSpec> spec = model_from_config(c);
    if (c.parallel.tp > 1) (void)spec->sharded(ModelShard{0, c.parallel.tp});  // tp fits the shape
    if (c.parallel.pp > 1) (void)parallel::pipeline_stage_layers(*spec, pipeline_layout_of(c, *spec));
    if (c.memory.limit_mb > 0) check_memory_limit_of(c, spec, ranks);
    if (a.check) {
      fmt::print("{}\n", resolved_json(c).dump(2));
      return;
    }
    launch_ranks(a, c);
    return;
  }
  // Threads per rank: the cores shared among this node's ranks.
  const long cores = std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));
  set_thread_count(c.train.threads > 0 ? c.train.threads
                                       : static_cast<int>(std::max(1L, cores / world.local_size)));
  // Timed sgemm backend choices may differ between processes (a run and its
  // restart, or two ranks): a deterministic run keeps them on one backend.
  if (c.deterministic) cpu::pin_sgemm_for_determinism();

  TrainerOptions o;
  o.model = model_from_config(c);
  o.init_from = c.init_from;
  o.train_pattern = c.data.train;
  o.val_pattern = c.data.val;
  o.data_workers = c.data.workers;
  o.micro_batch = c.train.micro_batch;
  o.grad_accum = c.train.grad_accum;
  o.recompute = recompute_from_config(c.recompute);
  o.precision = precision_from_name(c.precision);
  o.loss_scale.initial_scale = c.loss_scale.initial;
  o.loss_scale.growth_interval = c.loss_scale.growth_interval;
  o.loss_scale.hysteresis = c.loss_scale.hysteresis;
  o.loss_scale.min_scale = c.loss_scale.min;
  o.loss_scale.max_scale = std::max(c.loss_scale.initial, o.loss_scale.max_scale);
  o.loss_scale.max_consecutive_skips = c.loss_scale.max_consecutive_skips;
  o.steps = c.train.steps;
  o.schedule.kind = c.train.schedule;
  // Sequences per step: a tp group and a pipeline share each batch.
  const int64_t replicas = std::max(1, world.size / (c.parallel.tp * c.parallel.pp));
  const int64_t global_batch = static_cast<int64_t>(c.train.micro_batch) * replicas * c.train.grad_accum;
  const double lr = scaled_lr(c.train, global_batch);
  if (lead && c.train.lr_scaling != "none")
    fmt::print("lr: {:g} scaled {} for global batch {} (tuned at {}) = {:g}\n", c.train.lr,
               c.train.lr_scaling, global_batch, c.train.lr_base_batch, lr);
  o.schedule.max_lr = static_cast<float>(lr);
  o.schedule.min_lr_ratio = static_cast<float>(c.train.min_lr_ratio);
  o.schedule.warmup = c.train.warmup;
  o.schedule.total = c.train.steps;
  o.optimizer.type = c.train.optimizer;
  o.optimizer.beta1 = static_cast<float>(c.train.beta1);
  o.optimizer.beta2 = static_cast<float>(c.train.beta2);
  o.optimizer.eps = static_cast<float>(c.train.eps);
  o.optimizer.weight_decay = static_cast<float>(c.train.weight_decay);
  o.optimizer.momentum = static_cast<float>(c.train.momentum);
  o.optimizer.nesterov = c.train.nesterov;
  o.optimizer.trust_coefficient = static_cast<float>(c.train.trust_coefficient);
  o.optimizer.offload = {c.offload.optimizer_state, c.offload.path, c.offload.unit_mb,
                         c.offload.prefetch};
  o.optimizer.trust_clip = static_cast<float>(c.train.trust_clip);
  o.optimizer.exclude_norms_and_biases = c.train.exclude_norms_and_biases;
  o.clip = static_cast<float>(c.train.clip);
  o.eval_every = c.train.eval_every;
  o.eval_batches = c.train.eval_batches;
  o.log_every = c.train.log_every;
  o.sample_every = c.train.sample_every;
  o.max_minutes = c.train.max_minutes;
  o.save_every = c.train.save_every;
  o.seed = c.train.seed;
  o.run_dir = c.telemetry.dir;
  o.model_out = c.out;
  o.resolved_config_json = resolved_json(c).dump(2);
  o.dp.bucket_bytes = static_cast<size_t>(std::llround(c.parallel.bucket_mb * (1 << 20)));
  o.dp.first_bucket_bytes = static_cast<size_t>(std::llround(c.parallel.first_bucket_mb * (1 << 20)));
  o.dp.verify = parallel::DataParallelOptions::from_env().verify;
  o.dp.grad_dtype = dtype_from_name(c.comm.grad_dtype);
  o.dp.compression.type = c.comm.compression.type;
  o.dp.compression.rank = c.comm.compression.rank;
  o.dp.compression.ratio = c.comm.compression.ratio;
  o.dp.compression.warmup_steps = c.comm.compression.warmup_steps;
  o.dp.compression.error_feedback = c.comm.compression.error_feedback;
  o.local_sgd.sync_every = c.parallel.local_sgd.sync_every;
  o.local_sgd.outer_lr = static_cast<float>(c.parallel.local_sgd.outer_lr);
  o.local_sgd.outer_momentum = static_cast<float>(c.parallel.local_sgd.outer_momentum);
  o.local_sgd.nesterov = c.parallel.local_sgd.nesterov;
  o.parameter_server.enabled = c.parallel.parameter_server.enabled;
  o.parameter_server.staleness = c.parallel.parameter_server.staleness;
  o.parameter_server.staleness_lr = c.parallel.parameter_server.staleness_lr;
  o.zero_stage = c.zero.stage;
  o.tp = c.parallel.tp;
  o.pp = c.parallel.pp;
  o.pipe_schedule = c.parallel.schedule;
  o.pipe_chunks = c.parallel.chunks;
  o.pipe_stage_layers = parallel::parse_stage_layers(c.parallel.stage_layers, "parallel.stage_layers");
  o.sequence_parallel = c.parallel.sequence_parallel;
  o.sync_bn = c.model.sync_bn;
  o.zero_persist_threshold = c.zero.persist_threshold;
  o.memory_limit_bytes = c.memory.limit_mb * 1e6;
  o.trace = c.telemetry.trace;
  o.price_per_device_hour = c.telemetry.price_per_device_hour;
  o.peak_gflops = c.telemetry.peak_gflops;
  o.checkpoint.dir = c.checkpoint.dir;
  o.checkpoint.every = c.checkpoint.every;
  o.checkpoint.keep_last = c.checkpoint.keep_last;
  o.checkpoint.milestone_every = c.checkpoint.milestone_every;
  o.checkpoint.async = c.checkpoint.async;
  o.checkpoint.memory_every = c.checkpoint.memory_every;
  o.checkpoint.memory_dir = c.checkpoint.memory_dir;
  o.checkpoint.resume = c.checkpoint.resume;
  o.device = parse_device(c.device);
  if (world.size > 1) {
    comm::CommOptions co = comm::CommOptions::from_env();
    // The config chooses unless the environment already did.
    if (c.comm.transport != "auto" && !std::getenv("MESHTRAIN_COMM_TRANSPORT"))
      co.transport = c.comm.transport;
    if (!std::getenv("MESHTRAIN_COMM_TIMEOUT")) co.timeout_s = c.comm.timeout_s;
    // Bucket allreduces always go to the progress engine: run inline they
    // would block backward until every peer arrives.
    co.inline_bytes = 0;
    if (c.deterministic) pin_deterministic_algorithms(co, world);
    o.comm = comm::Communicator::from_env(co);
  }
  try {
    run_trainer(o);
  } catch (const Error& e) {
    if (world.size > 1) throw Error(fmt::format("rank {}: {}", world.rank, e.what()));
    throw;
  }
}
}  // namespace

void register_train(CLI::App& app) {
  auto a = std::make_shared<TrainArgs>();
  auto* c = app.add_subcommand("train", "Train a model from a JSON configuration");
  a->elastic.launch.heartbeat_timeout_s = 300;
  c->add_option("--config", a->config, "Configuration file (JSON; keys in docs/CONFIG.md)");
  c->add_option("--set", a->sets, "Override one key, e.g. --set train.lr=3e-4 (repeatable)")
      ->take_all();
  c->add_option("--nproc", a->nproc,
                "Train data-parallel on N local ranks (launches N processes; results equal one "
                "rank with N x the micro-batch)");
  add_elastic_options(c, a->elastic);
  c->add_flag("--trace", a->trace,
              "Write a Chrome/Perfetto trace (RUN_DIR/trace.json; same as --set telemetry.trace=true)");
  c->add_flag("--check", a->check,
              "Validate the configuration and the model it describes (the errors a run would give "
              "before training), print it resolved as JSON and stop");
  c->callback([a] { run_train(*a); });
}

}  // namespace meshtrain::cli
