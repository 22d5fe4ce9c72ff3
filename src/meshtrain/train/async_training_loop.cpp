// TrainingRun's loop for an asynchronous strategy (GradientSync::asynchronous,
// the parameter server): each rank takes steps from the run's shared count
// until train.steps x ranks are taken, with no collective in between, so a
// slow rank slows only itself. Evaluation, the final model and the report
// come once every rank has finished (the one collective, finish_async).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "meshtrain/launch/heartbeat.h"
#include "meshtrain/telemetry/metrics_log.h"
#include "meshtrain/telemetry/step_timer.h"
#include "meshtrain/telemetry/tensorboard_writer.h"
#include "meshtrain/train/evaluation.h"
#include "meshtrain/train/training_run.h"

namespace meshtrain {

namespace {
double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

void TrainingRun::async_loop() {
  std::optional<MetricsLog> metrics;
  std::optional<ProgressDisplay> progress;
  std::optional<telemetry::TensorBoardWriter> tb;
  if (lead_) {
    metrics.emplace(opt_.run_dir + "/metrics.jsonl", /*append=*/false);
    tb.emplace(opt_.run_dir);
    progress.emplace(stdout, static_cast<int>(std::max<int64_t>(1, opt_.log_every)));
  }
  comm::Communicator dp = mesh_.comm(parallel::Axis::DP);
  const int workers = dp.size();
  total_steps_ = opt_.steps;
  stepper_->set_total_steps(total_steps_);
  progress_state_.total_steps = total_steps_;
  setup_peak_ = memory_stats().total_peak;
  runtime_for(opt_.device).reset_peaks(opt_.device);
  t_start_ = now_s();
  int64_t my_steps = 0, bad_steps = 0;
  std::vector<data::Batch> batches(opt_.grad_accum);
  while (const std::optional<int64_t> step = sync_->claim_step(total_steps_)) {
    // This rank's own step count: the shared steps it takes are not consecutive,
    // and the test hooks (kill or stop at step N) must meet their step.
    launch::heartbeat_step(my_steps);
    const double t0 = now_s();
    std::vector<MicroBatch> micro;
    for (int a = 0; a < opt_.grad_accum; ++a) {
      batches[a] = train_->next();
      micro.push_back(micro_batch_of(batches[a]));
    }
    const double t_data = now_s() - t0;
    const StepStats st = stepper_->run(micro, *step);
    const double dt = now_s() - t0;
    ++my_steps;
    // A worker's non-finite step pushes nothing; many in a row still stop it.
    bad_steps = st.finite || st.overflow_skipped ? 0 : bad_steps + 1;
    MT_CHECK(bad_steps < opt_.max_bad_steps, "training diverged on rank {}: {} consecutive steps with "
             "a non-finite loss or gradient (last at step {}); lower train.lr or check the data",
             rank_, bad_steps, *step + 1);
    result_.final_loss = st.loss;
    if (!lead_) continue;
    // Rank 0's own steps: its loss, its share of the tokens.
    // (The optimizer time is the push, the wait for the shards and their updates.)
    telemetry::StepTelemetry t = step_record(*step, st, t_data, dt);
    t.tokens = tokens_per_step_ / workers;
    t.samples = global_batch_ / workers;
    t.per_sample = spec_.input() == ModelSpec::Input::Dense;
    t.devices = 1;
    t.flops_per_token = spec_.flops_per_token(T_);
    t.peak_mem_bytes = static_cast<double>(memory_stats().total_peak);
    t.price_per_device_hour = opt_.price_per_device_hour;
    nlohmann::json rec = t.to_json();
    rec["rank_steps"] = my_steps;
    publish_step(t, rec, *metrics, *tb, *progress);
  }
  if (progress) progress->finish();
  const double train_s = now_s() - t_start_;
  sync_->finish_async();  // every rank waits for the last push; all hold the final parameters
  std::vector<int64_t> steps_of(static_cast<size_t>(workers));
  dp.allgather(&my_steps, steps_of.data(), steps_of.size(), DType::I64).wait();
  if (opt_.dp.verify) sync_->verify_replicas();
  if (val_ && opt_.eval_every > 0) {
    const Evaluation e = evaluate([&](const MicroBatch& mb) { return model_->forward(mb); }, *model_,
                                  model_, *val_, opt_.eval_batches, &dp);
    progress_state_.val_loss = static_cast<float>(e.loss);
    say(fmt::format("step {:>6} | val loss {:.4f} (after every rank's last step)", total_steps_, e.loss));
  }
  std::string per_rank;
  for (int64_t s : steps_of) per_rank += fmt::format("{}{}", per_rank.empty() ? "" : ", ", s);
  say(fmt::format("asynchronous run: {} steps in all over {} ranks in {:.1f} s (steps per rank: {})",
                  total_steps_ * workers, workers, train_s, per_rank));
  say(sync_->async_report());
  result_.resumed_step = 0;
  result_.steps = total_steps_;
  result_.seconds = train_s;
  // Every rank's tokens (steps x ranks micro-batches of each rank's size).
  result_.tokens_per_s = static_cast<double>(tokens_per_step_) * total_steps_ / train_s;
  result_.final_val_loss = progress_state_.val_loss;
  result_.model_path = opt_.model_out.empty() ? opt_.run_dir + "/model.safetensors" : opt_.model_out;
}

}  // namespace meshtrain
