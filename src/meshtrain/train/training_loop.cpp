// TrainingRun's loop (train/training_run.h): one iteration per step - the
// micro-batches, TrainStep, the step's telemetry, the time budget, evaluation,
// checkpoints and samples - until the run's length.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <cstdlib>

#include "meshtrain/io/model_file.h"
#include "meshtrain/kernels/cpu/gemm_peak.h"
#include "meshtrain/launch/heartbeat.h"
#include "meshtrain/nn/sampler.h"
#include "meshtrain/telemetry/metrics_log.h"
#include "meshtrain/telemetry/step_timer.h"
#include "meshtrain/telemetry/tensorboard_writer.h"
#include "meshtrain/train/evaluation.h"
#include "meshtrain/train/time_budget.h"
#include "meshtrain/train/training_run.h"

namespace meshtrain {

using telemetry::TraceScope;

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Each rank's busy time (step minus the communication it waited for), gathered
// so rank 0 can name the slowest rank.
telemetry::StragglerReport gather_busy_times(comm::Communicator& comm, double busy_s) {
  std::vector<double> all(static_cast<size_t>(comm.size()));
  // allgather takes the total count: one double from each rank.
  comm.allgather(&busy_s, all.data(), all.size(), DType::F64).wait();
  return telemetry::straggler_report(all);
}

// Test hook: stop every rank abruptly after this step (and its checkpoint),
// as a killed job would, so resume tests can interrupt a run at a known step.
int64_t crash_after_step() {
  const char* s = std::getenv("MESHTRAIN_TEST_CRASH_AFTER_STEP");
  return s && *s ? std::atoll(s) : 0;
}

}  // namespace

telemetry::StepTelemetry TrainingRun::step_record(int64_t step, const StepStats& st, double data_s,
                                                  double step_s) const {
  telemetry::StepTelemetry t;
  t.step = step + 1;
  t.loss = st.loss;
  t.lr = st.lr;
  t.grad_norm = st.grad_norm;
  t.skipped = !st.finite;
  t.time.data_wait_s = data_s;
  t.time.forward_s = st.forward_s;
  t.time.backward_s = st.backward_s;
  t.time.optimizer_s = st.optimizer_s;
  t.time.step_s = step_s;
  return t;
}

void TrainingRun::publish_step(telemetry::StepTelemetry& t, const nlohmann::json& rec,
                               MetricsLog& metrics, telemetry::TensorBoardWriter& tb,
                               ProgressDisplay& progress) {
  metrics.write(rec);
  tb.add_scalars(t.step, t.scalars());
  summary_.add(t);
  t.fill_progress(progress_state_);
  progress_state_.elapsed_s = now_s() - t_start_;
  progress.update(progress_state_);
}

double TrainingRun::predicted_memory_copies_per_rank() const {
  const double shard = 4.0 * static_cast<double>(model_->param_buffer().numel()) *
                       static_cast<double>(1 + opt_.optimizer.states_per_param()) /
                       mesh_.size(parallel::Axis::DP);
  return 2 * 2 * shard;
}

void TrainingRun::loop() {
  if (sync_->asynchronous()) return async_loop();
  // Collective on every rank (the writer splits its own communicator).
  // Under tensor parallelism the whole world writes the logical checkpoint.
  auto checkpoints = std::make_unique<TrainingCheckpointer>(
      opt_.checkpoint, mp_ckpt_ ? world_comm() : comm_,
      opt_.resolved_config_json.empty() ? nlohmann::json::object()
                                       : nlohmann::json::parse(opt_.resolved_config_json),
      ckpt::MeshShape{mesh_.size(parallel::Axis::DP), opt_.tp, opt_.pp}, global_batch_, mp_ckpt_.get(),
      start_step_);
  // An async save's snapshot is copied while the next step's forward and
  // backward run; the update, the first write to what it copies, waits for it.
  stepper_->set_before_update([&checkpoints] { return checkpoints->wait_for_snapshot(); });
  if (opt_.checkpoint.every > 0)
    say(fmt::format("checkpoints: every {} steps to {} ({}, keep last {})", opt_.checkpoint.every,
                    opt_.checkpoint.dir, opt_.checkpoint.async ? "async" : "sync",
                    opt_.checkpoint.keep_last));
  if (opt_.checkpoint.memory_every > 0) {
    // A rank's shard: its 1/dp of the f32 parameters and optimizer states;
    // its node keeps it and a buddy's, for two steps.
    say(fmt::format("in-memory checkpoints with buddy copies: every {} steps and with each disk "
                    "checkpoint, in {} (about {:.1f} MB of node memory per rank: its shard and a "
                    "buddy's, two steps each)", opt_.checkpoint.memory_every,
                    opt_.checkpoint.memory_dir, predicted_memory_copies_per_rank() / 1e6));
  }

  // MFU is quoted against the GEMM rate this rank's threads reach in the
  // precision the GEMMs run in (measured once): the bf16 GEMM for bf16, so a
  // bf16 run is not credited with beating fp32's peak; sgemm for fp32 and for
  // fp16 (whose GEMMs are sgemms after widening on CPUs). telemetry.peak_gflops
  // replaces the measurement (a known rate; a slow or emulated CPU).
  // A GPU's is its datasheet's dense rate (DeviceRuntime::matrix_peak).
  const DeviceRuntime::Peak device_peak =
      opt_.device.is_cpu() ? DeviceRuntime::Peak{}
                           : runtime_for(opt_.device).matrix_peak(opt_.device, is_mixed(opt_.precision));
  const double peak_flops = (opt_.peak_gflops > 0    ? opt_.peak_gflops
                             : device_peak.gflops > 0 ? device_peak.gflops
                             : opt_.precision == Precision::BF16 ? cpu::measure_bf16_gemm_gflops()
                                                                 : cpu::measure_sgemm_gflops()) * 1e9;
  if (opt_.peak_gflops <= 0 && device_peak.gflops > 0)
    say(fmt::format("MFU against {:.1f} TFLOP/s per {} ({}; telemetry.peak_gflops replaces it)",
                    device_peak.gflops / 1e3, opt_.device.str(), device_peak.basis));
  const double flops_per_token = spec_.flops_per_token(T_);

  // Only rank 0 reports; the others stay quiet unless they fail. A resumed
  // run appends to the metrics of the run it continues.
  std::optional<MetricsLog> metrics;
  std::optional<ProgressDisplay> progress;
  std::optional<telemetry::TensorBoardWriter> tb;
  if (lead_) {
    metrics.emplace(opt_.run_dir + "/metrics.jsonl", /*append=*/resumed_.has_value());
    tb.emplace(opt_.run_dir);
    progress.emplace(stdout, static_cast<int>(std::max<int64_t>(1, opt_.log_every)));
  }
  auto note = [&](const std::string& line) {
    if (progress) progress->note(line);
  };
  // The run's length: train.steps, or what train.max_minutes decides (kept
  // from the checkpoint when resuming a budgeted run).
  total_steps_ = opt_.steps;
  TimeBudget budget(opt_.max_minutes, start_step_, opt_.eval_every, opt_.eval_batches);
  if (budget.active() && resumed_ && resumed_->budgeted_steps > 0) {
    total_steps_ = std::min(opt_.steps, resumed_->budgeted_steps);
    budget = TimeBudget(0, 0, 0, 0);
    say(fmt::format("time budget: keeping the saved run length of {} steps", total_steps_));
  } else if (budget.active()) {
    say(fmt::format("time budget: {:g} min; the number of steps (at most {}) is decided from "
                    "the step time measured over steps {}-{}", opt_.max_minutes, opt_.steps,
                    start_step_ + 2, start_step_ + 1 + TimeBudget::kTimedSteps));
  }
  stepper_->set_total_steps(total_steps_);
  progress_state_.total_steps = total_steps_;
  result_.resumed_step = start_step_;
  // Peaks from here on are the training's (setup may hold full buffers once).
  setup_peak_ = memory_stats().total_peak;
  runtime_for(opt_.device).reset_peaks(opt_.device);
  t_start_ = now_s();
  int64_t bad_steps = 0;
  const int64_t crash_after = crash_after_step();
  std::vector<data::Batch> batches(opt_.grad_accum);
  for (int64_t step = start_step_; step < total_steps_; ++step) {
    launch::heartbeat_step(step);  // the elastic launcher's liveness signal (launch/heartbeat.h)
    const double t0 = now_s();
    std::vector<MicroBatch> micro;
    {
      TraceScope trace(tracer_.get(), "data wait", "data");
      for (int a = 0; a < opt_.grad_accum; ++a) {
        batches[a] = train_->next();
        micro.push_back(micro_batch_of(batches[a]));
      }
    }
    const double t_data = now_s() - t0;
    StepStats st = stepper_->run(micro, step);
    const double dt = now_s() - t0;
    // st.finite and st.loss are reduced over ranks: every rank decides alike.
    if (st.overflow_skipped) {
      // fp16: an overflow on some rank; every rank skipped and lowered the scale.
      note(fmt::format("step {}: fp16 gradients overflowed at loss scale {:g}; update skipped, "
                       "loss scale now {:g}", step + 1, st.loss_scale, mixed_->loss_scale()));
    } else if (!st.finite) {
      ++bad_steps;
      note(fmt::format("step {}: loss {} / grad norm {} is not finite; update skipped",
                                step + 1, st.loss, st.grad_norm));
      MT_CHECK(bad_steps < opt_.max_bad_steps, "training diverged: {} consecutive steps with a "
               "non-finite loss or gradient (last at step {}); lower train.lr or check the data",
               bad_steps, step + 1);
    } else {
      bad_steps = 0;
    }
    telemetry::StepTelemetry t = step_record(step, st, t_data, dt);
    // Tensor-parallel collectives block compute: exposed, and communication.
    t.time.comm_exposed_s = st.comm.exposed_s + st.tp_comm_s;
    t.time.comm_total_s = st.comm.total_s + st.tp_comm_s;
    t.time.comm_tp_s = st.tp_comm_s;
    t.time.pp_wait_s = st.pp_wait_s;
    t.grad_wire_bytes = st.comm.wire_bytes;
    t.grad_dense_bytes = st.comm.dense_bytes;
    t.tokens = tokens_per_step_;
    t.samples = global_batch_;
    t.per_sample = spec_.input() == ModelSpec::Input::Dense;
    t.devices = world_;
    t.flops_per_token = flops_per_token;
    t.peak_flops_per_device = peak_flops;
    t.peak_mem_bytes = static_cast<double>(memory_stats().total_peak);
    t.price_per_device_hour = opt_.price_per_device_hour;
    if (comm_) t.straggler = gather_busy_times(*comm_, dt - st.comm.exposed_s);
    if (budget.active()) {
      std::string why;
      if (auto n = budget.after_step(step + 1, dt, st.forward_s, now_s() - t_start_, total_steps_,
                                     comm_, why)) {
        total_steps_ = *n;
        stepper_->set_total_steps(total_steps_);
        checkpoints->set_budgeted_steps(total_steps_);
        progress_state_.total_steps = total_steps_;
      }
      if (!why.empty()) note(why);
    }
    const bool last = step + 1 == total_steps_;
    if (val_ && opt_.eval_every > 0 && ((step + 1) % opt_.eval_every == 0 || last)) {
      // Through the pipeline when there is one (every stage takes part).
      auto forward = [&](const MicroBatch& mb) {
        return pipe_ ? pipeline_forward(mb) : model_->forward(mb);
      };
      // Measures besides the loss come from the last layer's model: not
      // gathered through a pipeline yet.
      const Evaluation e = evaluate(forward, *model_, pipe_ ? nullptr : model_, *val_,
                                    opt_.eval_batches, comm_);
      t.val_loss = e.loss;
      std::string measures;
      for (const auto& [name, value] : e.metrics) {
        t.val_metrics.emplace_back(name, value);
        measures += fmt::format(" | val {} {:.2f}%", name, 100.0 * value);
      }
      note(fmt::format("step {:>6} | val loss {:.4f}{} | train loss {:.4f}", step + 1, *t.val_loss,
                       measures, st.loss));
    }
    if (checkpoints->due(step + 1)) {
      TraceScope trace(tracer_.get(), "checkpoint save", "io");
      const double stall =
          checkpoints->save(step + 1, *model_, stepper_->optimizer(), train_->position(), own_params_,
                           mixed_->state(), sync_);
      const std::string where = checkpoints->disk_due(step + 1)
                                    ? fmt::format("{}/step_{:08d}", opt_.checkpoint.dir, step + 1)
                                    : std::string("in memory with buddy copies");
      note(fmt::format("step {:>6} | checkpoint {} ({}; training waited {:.1f} ms)", step + 1, where,
                       opt_.checkpoint.async ? "writing in the background" : "written",
                       stall * 1e3));
    }
    const bool save_due = opt_.save_every > 0 && (step + 1) % opt_.save_every == 0 && !last;
    const bool sample_due = opt_.sample_every > 0 && (step + 1) % opt_.sample_every == 0 &&
                            spec_.input() == ModelSpec::Input::Tokens && spec_.vocab_size() <= 256;
    // ZeRO: rank 0 needs the whole, current model (collective on every rank);
    // tensor parallelism: the shards assembled (collective over tp).
    if (save_due || sample_due) sync_->gather_full_parameters();
    const Tensor whole = save_due || sample_due ? product_parameters() : Tensor();
    if (save_due && lead_) save_model_safetensors(opt_.run_dir + "/model.safetensors", product_spec(), whole);
    if (lead_ && sample_due) {
      // A short generation so a person sees what the model has learned so
      // far, by the whole model's KV-cache decoder (any tp).
      SampleOptions so;
      so.max_new_tokens = 120;
      so.temperature = 0.8f;
      so.top_k = 40;
      Rng rng(opt_.seed + static_cast<uint64_t>(step));
      std::vector<int32_t> prompt = {batches[0].inputs.data<int32_t>()[0]};
      std::unique_ptr<Decoder> dec = product_spec().make_decoder(whole);
      std::vector<int32_t> out;
      if (dec)
        out = generate(*dec, product_spec(), prompt, so, rng);
      else if (opt_.tp == 1 && opt_.zero_stage < 3)  // stage 3 gathered f32 only, not its units
        out = generate(*model_, prompt, so, rng);
      std::string text;
      for (int32_t tok : out) text.push_back(static_cast<char>(tok));
      for (char& ch : text) if (ch == '\n' || ch == '\t') ch = ' ';
      if (!out.empty()) note(fmt::format("step {:>6} | sample: {}", step + 1, text));
    }
    if (save_due || sample_due) sync_->release_full_parameters();
    if (lead_) {
      nlohmann::json rec = t.to_json();
      if (comm_) {
        // Gradient reduction detail: first launch vs the last backward's length
        // shows communication starting while backward still runs.
        rec["comm_buckets"] = st.comm.buckets;
        rec["comm_first_launch_ms"] = st.comm.first_launch_s * 1e3;
        rec["last_backward_ms"] = st.comm.backward_s * 1e3;
        // The same in event order (counts, no clock; replicated and ZeRO-1):
        // buckets launched before backward's last grad-ready report, and
        // buckets already running on the progress engine when backward returned.
        if (st.comm.launched_ahead >= 0) rec["comm_launched_ahead"] = st.comm.launched_ahead;
        if (st.comm.started_in_backward >= 0)
          rec["comm_started_in_backward"] = st.comm.started_in_backward;
      }
      if (st.update_wait_s > 0) rec["ckpt_snapshot_wait_ms"] = st.update_wait_s * 1e3;
      publish_step(t, rec, *metrics, *tb, *progress);
    }
    result_.final_loss = st.loss;
    if (t.val_loss) progress_state_.val_loss = static_cast<float>(*t.val_loss);
    if (crash_after > 0 && step + 1 == crash_after) {
      checkpoints->wait();
      fmt::print(stderr, "MESHTRAIN_TEST_CRASH_AFTER_STEP: rank {} exits after step {}\n", rank_,
                 step + 1);
      std::fflush(stdout);
      std::_Exit(3);
    }
  }
  if (progress) progress->finish();
  // Every save complete (index written) before the run ends; the in-memory
  // copies of a finished run are removed.
  checkpoints->finish();
  if (opt_.checkpoint.memory_every > 0) {
    // The copies this rank's node held, and how many ranks shared them.
    memory_copies_bytes_ = checkpoints->memory_copies_bytes();
    if (comm::Communicator* w = world_comm()) {
      std::vector<int64_t> nodes(static_cast<size_t>(world_));
      const int64_t mine = w->node_id();
      w->allgather(&mine, nodes.data(), nodes.size(), DType::I64).wait();
      memory_copies_node_ranks_ = static_cast<int>(std::count(nodes.begin(), nodes.end(), mine));
    }
  }
  stepper_->set_before_update(nullptr);  // the checkpointer goes with this scope
  // Replicas that drifted apart would be a bug; checked in debug mode.
  if (opt_.dp.verify) sync_->verify_replicas();
  const int64_t steps_run = total_steps_ - std::min(total_steps_, start_step_);
  result_.steps = std::max(total_steps_, start_step_);
  result_.seconds = now_s() - t_start_;
  result_.tokens_per_s = steps_run > 0 ? static_cast<double>(tokens_per_step_) * steps_run / result_.seconds : 0;
  result_.final_val_loss = progress_state_.val_loss;
  result_.model_path = opt_.model_out.empty() ? opt_.run_dir + "/model.safetensors" : opt_.model_out;
}

}  // namespace meshtrain
