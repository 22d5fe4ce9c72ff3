// TrainingRun's setup (train/training_run.h): everything before the first
// collective decision about checkpoints.
#include <fmt/format.h>

#include <filesystem>
#include <fstream>

#include "meshtrain/ckpt/model_convert.h"
#include "meshtrain/core/threads.h"
#include "meshtrain/train/cpu_report.h"
#include "meshtrain/train/training_run.h"

namespace meshtrain {

namespace {
const ModelSpec& spec_of(const TrainerOptions& opt) {
  MT_CHECK(opt.model, "no model to train");
  return *opt.model;
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
      spec_(spec_of(opt)),
      T_(sequence_length(opt)),
      world_(opt.comm.valid() ? opt.comm.size() : 1),
      rank_(opt.comm.valid() ? opt.comm.rank() : 0),
      lead_(rank_ == 0),
      // Data parallelism over every rank (the only axis until tensor and
      // pipeline parallelism land): the dp coordinate slices the data.
      mesh_(opt.comm, {world_, 1, 1}) {
  MT_CHECK(opt.micro_batch >= 1 && opt.grad_accum >= 1 && opt.steps >= 1,
           "micro_batch, grad_accum and steps must be >= 1");
  // Refuse, before allocating, what the formulas say cannot fit the limit.
  predicted_ = predict_training_memory(spec_, opt.micro_batch, T_, thread_count(), opt.recompute,
                                       opt.precision);
  check_memory_limit(memory_plan(0), opt.memory_limit_bytes);
  say(cpu_report_line());
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
  so.precision = opt.precision;
  synced_ = parallel::make_synced_model(mesh_.comm(parallel::Axis::DP), opt.model, so);
  model_ = synced_.model.get();
  sync_ = synced_.sync.get();
  comm_ = sync_->comm();
  model_->set_recompute(opt.recompute);
  mixed_ = std::make_unique<MixedPrecision>(*model_, MixedPrecisionOptions{opt.precision, opt.loss_scale});
  if (opt.init_from.empty()) {
    model_->init_weights(opt.seed);
  } else {
    // A model file, or a checkpoint directory (its parameters; fresh optimizer).
    say(fmt::format("loaded weights from {}", ckpt::load_init_weights(opt.init_from, *model_)));
  }
  // ZeRO: every rank starts from rank 0's weights; stage 3 then keeps only
  // its own range before the optimizer state is allocated (parallel/zero.h),
  // so setup never holds both in full.
  sync_->before_resume();
  // Token ids are checked against the vocabulary by the model's forward on every batch.
  stepper_ = std::make_unique<TrainStep>(*model_, *sync_, opt.adam, opt.schedule, opt.clip);
  stepper_->set_mixed_precision(mixed_.get());
  // Effective batch: micro-batch x ranks x accumulation sequences per step.
  global_batch_ = static_cast<int64_t>(opt.micro_batch) * world_ * opt.grad_accum;
  tokens_per_step_ = global_batch_ * T_;
}

TrainingRun::~TrainingRun() = default;  // clear_tracer_ drops the global tracer pointer

void TrainingRun::say(const std::string& line) const {
  if (lead_) fmt::print("{}\n", line);
}

MemoryPlan TrainingRun::memory_plan(int rank) const {
  MemoryPlan plan;
  plan.model = opt_.model;
  plan.B = opt_.micro_batch;
  plan.T = T_;
  plan.threads = thread_count();
  plan.world = world_;
  plan.rank = rank;
  plan.zero_stage = world_ > 1 ? opt_.zero_stage : 0;
  plan.persist_threshold = opt_.zero_persist_threshold;
  plan.bytes = opt_.state_bytes;
  // Mixed precision: the model's 16-bit compute copy beside its f32 master
  // parameters (nn/model.h), 2 more bytes per parameter.
  if (is_mixed(opt_.precision)) plan.bytes.p_full = 2;
  if (opt_.dp.grad_dtype == DType::BF16) plan.grad_wire = 2;  // comm.grad_dtype = bf16
  plan.base = predicted_;
  return plan;
}

}  // namespace meshtrain
