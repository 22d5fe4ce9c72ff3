// TrainingRun's resume (train/training_run.h): the checkpoint to continue
// from, chosen collectively, and the data loaders positioned after it.
#include <fmt/format.h>

#include "meshtrain/ckpt/checkpoint_dir.h"
#include "meshtrain/core/threads.h"
#include "meshtrain/train/training_run.h"

namespace meshtrain {

void TrainingRun::resume() {
  // Resume (every rank) before after_resume(), which then hands every rank
  // the same restored weights: replicated ranks take rank 0's, ZeRO ranks
  // each read only their own range of a checkpoint and gather the rest from
  // the owners.
  if (auto r = sync_->resume_range()) own_params_ = ckpt::ElemRange{r->begin, r->end};
  // Under tensor or pipeline parallelism every rank of the world agrees on
  // the (logical) checkpoint.
  // An asynchronous run writes no checkpoint and starts fresh (the config
  // refuses a checkpoint directory with it).
  if (!sync_->asynchronous())
    resumed_ = resume_training(opt_.checkpoint, *model_, stepper_->optimizer(),
                               mp_ckpt_ ? world_comm() : comm_, global_batch_, own_params_,
                               mp_ckpt_.get(), sync_);
  start_step_ = resumed_ ? resumed_->step : 0;
  if (resumed_) {
    mixed_->load_state(resumed_->loss_scaler);  // fp16: continue at the saved scale
    for (const std::string& why : resumed_->skipped) say(fmt::format("warning: {}", why));
    say(fmt::format("resumed from {} at step {} (data epoch {} batch {}, optimizer step {})",
                    resumed_->dir, resumed_->step, resumed_->position.epoch,
                    resumed_->position.batch, stepper_->optimizer().steps_taken()));
    if (!resumed_->memory_note.empty()) say(fmt::format("resumed from {}", resumed_->memory_note));
    if (!resumed_->data_note.empty()) say(fmt::format("warning: {}", resumed_->data_note));
  } else if (opt_.checkpoint.resume == "auto" && !opt_.checkpoint.dir.empty() && !sync_->asynchronous()) {
    say(fmt::format("no checkpoint to resume from in {}: starting at step 0", opt_.checkpoint.dir));
  }
  sync_->after_resume();
  open_data();
  describe();
}

void TrainingRun::open_data() {
  data::LoaderOptions lo;
  lo.pattern = opt_.train_pattern;
  lo.batch = opt_.micro_batch;
  lo.seq_len = T_;
  lo.seed = opt_.seed;
  lo.workers = opt_.data_workers;
  lo.rank = mesh_.rank(parallel::Axis::DP);
  lo.world_size = mesh_.size(parallel::Axis::DP);
  if (resumed_) lo.start = resumed_->position;
  if (spec_.input() == ModelSpec::Input::Dense) {
    for (int64_t d : spec_.sample_shape()) lo.sample_shape.push_back(d);
    lo.classes = spec_.vocab_size();
  }
  train_ = data::open_batch_source(lo);
  // Masked instruction shards: the loss is the mean over the response tokens.
  stepper_->set_token_weighted(train_->masked());
  if (!opt_.val_pattern.empty()) {
    data::LoaderOptions vo = lo;
    vo.pattern = opt_.val_pattern;
    vo.mode = data::LoaderMode::Eval;
    vo.prefetch = 0;
    vo.start = {};
    val_ = data::open_batch_source(vo);
  }
}

void TrainingRun::describe() const {
  say(fmt::format("model: {}", opt_.model->describe()));  // the whole model, not this rank's shard
  say(mixed_->describe());
  if (spec_.input() == ModelSpec::Input::Dense)
    say(fmt::format("batch: {} samples x {} rank(s) x {} accumulation = {} samples/step, {} steps, "
                    "{} thread(s) per rank", opt_.micro_batch, mesh_.size(parallel::Axis::DP),
                    opt_.grad_accum, global_batch_, opt_.steps, thread_count()));
  else
    say(fmt::format("batch: {} x {} tokens x {} rank(s) x {} accumulation = {} sequences = {} "
                    "tokens/step, {} steps, {} thread(s) per rank", opt_.micro_batch, T_,
                    mesh_.size(parallel::Axis::DP),
                    opt_.grad_accum, global_batch_, tokens_per_step_, opt_.steps, thread_count()));
  if (opt_.zero_stage > 0 && world_ == 1)
    say(fmt::format("zero.stage = {}: one rank has nothing to shard with; training as stage 0",
                    opt_.zero_stage));
  if (opt_.parameter_server.enabled && world_ == 1)
    say("parallel.parameter_server: one rank has no other worker to wait for; training as a single rank");
  if (world_ > 1) say(sync_->describe());
  say(fmt::format("data: {} ({} batches/epoch)", train_->describe(), train_->batches_per_epoch()));
  // Rank 0's share under the ZeRO stage (memory_report.h formulas).
  const RankMemory rm = predict_rank_memory(memory_plan(0));
  say(fmt::format("memory (predicted, per rank): {:.1f} MB = params {:.1f} + grads {:.1f} + "
                  "optimizer {:.1f} + activations {:.1f} + comm {:.1f} + workspace {:.1f}",
                  rm.total() / 1e6, rm.params / 1e6, rm.grads / 1e6, rm.optimizer / 1e6,
                  rm.activations / 1e6, rm.comm / 1e6, rm.workspace / 1e6));
  if (predicted_.frozen_params > 0) {
    // LoRA: what full fine-tuning of the base would hold in model states here.
    auto full = memory_plan(0);
    full.model = spec_.frozen_base();
    full.base = predict_training_memory(*full.model, opt_.micro_batch, T_, thread_count(),
                                        opt_.recompute, opt_.precision, Device::cpu(), 1, false,
                                        opt_.optimizer.states_per_param());
    if (is_mixed(opt_.precision)) full.bytes.p_full = 2;
    const RankMemory fm = predict_rank_memory(full);
    say(fmt::format("LoRA: the frozen base holds {:.1f} MB of the parameters; model states {:.1f} MB "
                    "vs {:.1f} MB for full fine-tuning with this layout ({:.2f}x)",
                    predicted_.frozen_params / 1e6, rm.model_states() / 1e6, fm.model_states() / 1e6,
                    static_cast<double>(rm.model_states()) / std::max<int64_t>(1, fm.model_states())));
  }
}

}  // namespace meshtrain
