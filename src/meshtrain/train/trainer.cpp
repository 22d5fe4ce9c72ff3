#include "meshtrain/train/trainer.h"

#include "meshtrain/train/cpu_report.h"
#include "meshtrain/train/time_budget.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>

#include "meshtrain/core/memory.h"
#include "meshtrain/core/threads.h"
#include "meshtrain/data/data_loader.h"
#include "meshtrain/ckpt/model_convert.h"
#include "meshtrain/io/model_file.h"
#include "meshtrain/kernels/cpu/gemm_peak.h"
#include "meshtrain/launch/heartbeat.h"
#include "meshtrain/nn/sampler.h"
#include "meshtrain/train/mixed_precision.h"
#include "meshtrain/telemetry/metrics_log.h"
#include "meshtrain/telemetry/progress.h"
#include "meshtrain/telemetry/run_summary.h"
#include "meshtrain/telemetry/step_timer.h"
#include "meshtrain/telemetry/tensorboard_writer.h"
#include "meshtrain/telemetry/trace_writer.h"
#include "meshtrain/train/memory_model.h"
#include "meshtrain/train/memory_report.h"
#include "meshtrain/parallel/make_gradient_sync.h"
#include "meshtrain/parallel/mesh.h"
#include "meshtrain/train/train_step.h"

namespace meshtrain {

using telemetry::TraceScope;

namespace {
double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Mean loss over the first `batches` global validation batches; with data
// parallelism each rank evaluates its slice and the means are averaged.
float evaluate(Model& model, data::DataLoader& val, int64_t batches, comm::Communicator* comm) {
  TraceScope trace(telemetry::global_tracer(), "eval", "compute");
  val.rewind();
  double sum = 0.0;
  int64_t n = std::min<int64_t>(batches, val.batches_per_epoch());
  for (int64_t i = 0; i < n; ++i) {
    data::Batch b = val.next();
    sum += model.forward(MicroBatch{b.inputs.data<int32_t>(), b.targets.data<int32_t>(),
                                    static_cast<int>(b.inputs.dim(0)),
                                    static_cast<int>(b.inputs.dim(1))});
  }
  if (n == 0) return -1.f;
  const double mean = sum / n;
  return static_cast<float>(comm ? comm->allreduce_scalar(mean, comm::ReduceOp::Avg) : mean);
}

// Each rank's busy time (step minus the communication it waited for), gathered
// so rank 0 can name the slowest rank.
telemetry::StragglerReport gather_busy_times(comm::Communicator& comm, double busy_s) {
  std::vector<double> all(static_cast<size_t>(comm.size()));
  // allgather takes the total count: one double from each rank.
  comm.allgather(&busy_s, all.data(), all.size(), DType::F64).wait();
  return telemetry::straggler_report(all);
}

// The inputs of the memory formulas for rank `rank`.
MemoryPlan memory_plan(const TrainerOptions& opt, int T, int world, int rank,
                       const MemoryPrediction& base) {
  MemoryPlan plan;
  plan.model = opt.model;
  plan.B = opt.micro_batch;
  plan.T = T;
  plan.threads = thread_count();
  plan.world = world;
  plan.rank = rank;
  plan.zero_stage = world > 1 ? opt.zero_stage : 0;
  plan.persist_threshold = opt.zero_persist_threshold;
  plan.bytes = opt.state_bytes;
  // Mixed precision: the model's 16-bit compute copy beside its f32 master
  // parameters (nn/model.h), 2 more bytes per parameter.
  if (is_mixed(opt.precision)) plan.bytes.p_full = 2;
  if (opt.dp.grad_dtype == DType::BF16) plan.grad_wire = 2;  // comm.grad_dtype = bf16
  plan.base = base;
  return plan;
}

// Every rank's peak bytes per memory category, gathered (collective).
// Per rank: the category peaks, then the training's total peak and the
// setup's (before training; ZeRO-3 holds the full parameters once there).
constexpr size_t kPeakValues = kMemCategoryCount + 2;
std::vector<std::vector<double>> gather_memory_peaks(comm::Communicator* comm, int world,
                                                     int64_t setup_peak) {
  const MemStats ms = mem_stats();
  std::vector<double> mine(kPeakValues), all(kPeakValues * world);
  for (size_t c = 0; c < kMemCategoryCount; ++c) mine[c] = static_cast<double>(ms.peak[c]);
  mine[kMemCategoryCount] = static_cast<double>(ms.total_peak);
  mine[kMemCategoryCount + 1] = static_cast<double>(setup_peak);
  if (comm) {
    // allgather takes the total count: kPeakValues values from each rank.
    comm->allgather(mine.data(), all.data(), all.size(), DType::F64).wait();
  } else {
    all = mine;
  }
  std::vector<std::vector<double>> out(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r)
    out[r].assign(all.begin() + r * kPeakValues, all.begin() + (r + 1) * kPeakValues);
  return out;
}

// Test hook: stop every rank abruptly after this step (and its checkpoint),
// as a killed job would, so resume tests can interrupt a run at a known step.
int64_t crash_after_step() {
  const char* s = std::getenv("MESHTRAIN_TEST_CRASH_AFTER_STEP");
  return s && *s ? std::atoll(s) : 0;
}
}  // namespace

TrainerSummary run_trainer(const TrainerOptions& opt) {
  MT_CHECK(opt.model, "no model to train");
  const ModelSpec& spec = *opt.model;
  const int T = opt.seq_len > 0 ? opt.seq_len : spec.seq_len();
  MT_CHECK(T <= spec.seq_len(), "train sequence length {} is longer than the model's context "
           "model.seq_len = {}", T, spec.seq_len());
  MT_CHECK(opt.micro_batch >= 1 && opt.grad_accum >= 1 && opt.steps >= 1,
           "micro_batch, grad_accum and steps must be >= 1");
  const int world = opt.comm.valid() ? opt.comm.size() : 1;
  const int rank = opt.comm.valid() ? opt.comm.rank() : 0;
  // Data parallelism over every rank (the only axis until tensor and
  // pipeline parallelism land): the dp coordinate slices the data.
  const parallel::Mesh mesh(opt.comm, {world, 1, 1});
  const bool lead = rank == 0;  // prints, writes metrics, saves the model
  // Refuse, before allocating, what the formulas say cannot fit the limit.
  check_memory_limit(memory_plan(opt, T, world, 0,
                                 predict_training_memory(spec, opt.micro_batch, T, thread_count(),
                                                         opt.recompute, opt.precision)),
                     opt.memory_limit_bytes);
  auto say = [lead](const std::string& line) {
    if (lead) fmt::print("{}\n", line);
  };
  say(cpu_report_line());
  if (lead) {
    std::filesystem::create_directories(opt.run_dir);
    if (!opt.resolved_config_json.empty()) {
      std::ofstream(opt.run_dir + "/config.json") << opt.resolved_config_json << "\n";
    }
  }
  // Every rank traces into its own file; layers and the communication thread
  // find the tracer through the global pointer.
  std::unique_ptr<telemetry::Tracer> tracer =
      opt.trace ? std::make_unique<telemetry::Tracer>(telemetry::rank_trace_path(opt.run_dir, rank), rank)
                : std::make_unique<telemetry::Tracer>();
  tracer->set_thread_name("main");
  telemetry::set_global_tracer(tracer.get());
  struct ClearTracer {  // never leave a dangling global pointer behind an error
    ~ClearTracer() { telemetry::set_global_tracer(nullptr); }
  } clear_tracer;

  // The gradient synchronization strategy, chosen once (replicated buckets,
  // ZeRO 1-3, or a single rank), and the model built on its buffers.
  parallel::GradientSyncOptions so;
  so.zero_stage = opt.zero_stage;
  so.persist_threshold = opt.zero_persist_threshold;
  so.dp = opt.dp;
  so.precision = opt.precision;
  parallel::SyncedModel synced = parallel::make_synced_model(mesh.comm(parallel::Axis::DP), opt.model, so);
  Model& model = *synced.model;
  parallel::GradientSync& sync = *synced.sync;
  comm::Communicator* comm = sync.comm();
  model.set_recompute(opt.recompute);
  MixedPrecision mixed(model, {opt.precision, opt.loss_scale});
  if (opt.init_from.empty()) {
    model.init_weights(opt.seed);
  } else {
    // A model file, or a checkpoint directory (its parameters; fresh optimizer).
    say(fmt::format("loaded weights from {}", ckpt::load_init_weights(opt.init_from, model)));
  }
  // ZeRO: every rank starts from rank 0's weights; stage 3 then keeps only
  // its own range before the optimizer state is allocated (parallel/zero.h),
  // so setup never holds both in full.
  sync.before_resume();
  // Token ids are checked against the vocabulary by the model's forward on every batch.
  TrainStep stepper(model, sync, opt.adam, opt.schedule, opt.clip);
  stepper.set_mixed_precision(&mixed);
  // Effective batch: micro-batch x ranks x accumulation sequences per step.
  const int64_t global_batch = static_cast<int64_t>(opt.micro_batch) * world * opt.grad_accum;
  const int64_t tokens_per_step = global_batch * T;

  // Resume (every rank; the checkpoint is chosen collectively) before
  // after_resume(), which then hands every rank the same restored weights:
  // replicated ranks take rank 0's, ZeRO ranks each read only their own
  // range of a checkpoint and gather the rest from the owners.
  std::optional<ckpt::ElemRange> own_params;
  if (auto r = sync.resume_range()) own_params = ckpt::ElemRange{r->begin, r->end};
  const std::optional<ResumePoint> resumed =
      resume_training(opt.checkpoint, model, stepper.optimizer(), comm, global_batch, own_params);
  const int64_t start_step = resumed ? resumed->step : 0;
  if (resumed) mixed.load_state(resumed->loss_scaler);  // fp16: continue at the saved scale
  if (resumed) {
    for (const std::string& why : resumed->skipped) say(fmt::format("warning: {}", why));
    say(fmt::format("resumed from {} at step {} (data epoch {} batch {}, optimizer step {})",
                    resumed->dir, resumed->step, resumed->position.epoch,
                    resumed->position.batch, stepper.optimizer().steps_taken()));
    if (!resumed->data_note.empty()) say(fmt::format("warning: {}", resumed->data_note));
  } else if (opt.checkpoint.resume == "auto" && !opt.checkpoint.dir.empty()) {
    say(fmt::format("no checkpoint to resume from in {}: starting at step 0", opt.checkpoint.dir));
  }
  sync.after_resume();

  data::LoaderOptions lo;
  lo.pattern = opt.train_pattern;
  lo.batch = opt.micro_batch;
  lo.seq_len = T;
  lo.seed = opt.seed;
  lo.rank = mesh.rank(parallel::Axis::DP);
  lo.world_size = mesh.size(parallel::Axis::DP);
  if (resumed) lo.start = resumed->position;
  data::DataLoader train(lo);
  std::optional<data::DataLoader> val;
  if (!opt.val_pattern.empty()) {
    data::LoaderOptions vo = lo;
    vo.pattern = opt.val_pattern;
    vo.mode = data::LoaderMode::Eval;
    vo.prefetch = 0;
    vo.start = {};
    val.emplace(vo);
  }
  say(fmt::format("model: {}", spec.describe()));
  say(mixed.describe());
  say(fmt::format("batch: {} x {} tokens x {} rank(s) x {} accumulation = {} sequences = {} "
                  "tokens/step, {} steps, {} thread(s) per rank", opt.micro_batch, T, world,
                  opt.grad_accum, global_batch, tokens_per_step, opt.steps, thread_count()));
  if (opt.zero_stage > 0 && world == 1)
    say(fmt::format("zero.stage = {}: one rank has nothing to shard with; training as stage 0",
                    opt.zero_stage));
  if (world > 1) say(sync.describe());
  say(fmt::format("data: {} windows in {} ({} batches/epoch)", train.num_windows(),
                  opt.train_pattern, train.batches_per_epoch()));
  const MemoryPrediction pred = predict_training_memory(spec, opt.micro_batch, T, thread_count(),
                                                        opt.recompute, opt.precision);
  {
    // Rank 0's share under the ZeRO stage (memory_report.h formulas).
    const RankMemory rm = predict_rank_memory(memory_plan(opt, T, world, 0, pred));
    say(fmt::format("memory (predicted, per rank): {:.1f} MB = params {:.1f} + grads {:.1f} + "
                    "optimizer {:.1f} + activations {:.1f} + comm {:.1f} + workspace {:.1f}",
                    rm.total() / 1e6, rm.params / 1e6, rm.grads / 1e6, rm.optimizer / 1e6,
                    rm.activations / 1e6, rm.comm / 1e6, rm.workspace / 1e6));
  }

  // Collective on every rank (the writer splits its own communicator).
  TrainingCheckpointer checkpoints(
      opt.checkpoint, comm,
      opt.resolved_config_json.empty() ? nlohmann::json::object()
                                       : nlohmann::json::parse(opt.resolved_config_json),
      world, global_batch);
  // An async save's snapshot is copied while the next step's forward and
  // backward run; the update, the first write to what it copies, waits for it.
  stepper.set_before_update([&checkpoints] { return checkpoints.wait_for_snapshot(); });
  if (opt.checkpoint.every > 0)
    say(fmt::format("checkpoints: every {} steps to {} ({}, keep last {})", opt.checkpoint.every,
                    opt.checkpoint.dir, opt.checkpoint.async ? "async" : "sync",
                    opt.checkpoint.keep_last));

  // MFU is quoted against the GEMM rate this rank's threads reach in the
  // precision the GEMMs run in (measured once): the bf16 GEMM for bf16, so a
  // bf16 run is not credited with beating fp32's peak; sgemm for fp32 and for
  // fp16 (whose GEMMs are sgemms after widening on CPUs).
  const double peak_flops = (opt.precision == Precision::BF16 ? cpu::measure_bf16_gemm_gflops()
                                                              : cpu::measure_sgemm_gflops()) * 1e9;
  const double flops_per_token = spec.flops_per_token(T);

  // Only rank 0 reports; the others stay quiet unless they fail. A resumed
  // run appends to the metrics of the run it continues.
  std::optional<MetricsLog> metrics;
  std::optional<ProgressDisplay> progress;
  std::optional<telemetry::TensorBoardWriter> tb;
  telemetry::RunSummary summary;
  if (lead) {
    metrics.emplace(opt.run_dir + "/metrics.jsonl", /*append=*/resumed.has_value());
    tb.emplace(opt.run_dir);
    progress.emplace(stdout, static_cast<int>(std::max<int64_t>(1, opt.log_every)));
  }
  auto note = [&](const std::string& line) {
    if (progress) progress->note(line);
  };
  // The run's length: train.steps, or what train.max_minutes decides (kept
  // from the checkpoint when resuming a budgeted run).
  int64_t total_steps = opt.steps;
  TimeBudget budget(opt.max_minutes, start_step, opt.eval_every, opt.eval_batches);
  if (budget.active() && resumed && resumed->budgeted_steps > 0) {
    total_steps = std::min(opt.steps, resumed->budgeted_steps);
    budget = TimeBudget(0, 0, 0, 0);
    say(fmt::format("time budget: keeping the saved run length of {} steps", total_steps));
  } else if (budget.active()) {
    say(fmt::format("time budget: {:g} min; the number of steps (at most {}) is decided from "
                    "the step time measured over steps {}-{}", opt.max_minutes, opt.steps,
                    start_step + 2, start_step + 1 + TimeBudget::kTimedSteps));
  }
  stepper.set_total_steps(total_steps);
  ProgressState ps;
  ps.total_steps = total_steps;
  TrainerSummary sum;
  sum.resumed_step = start_step;
  // Peaks from here on are the training's (setup may hold full buffers once).
  const int64_t setup_peak = mem_stats().total_peak;
  mem_reset_peaks();
  const double t_start = now_s();
  int64_t bad_steps = 0;
  const int64_t crash_after = crash_after_step();
  std::vector<data::Batch> batches(opt.grad_accum);
  for (int64_t step = start_step; step < total_steps; ++step) {
    launch::heartbeat_step(step);  // the elastic launcher's liveness signal (launch/heartbeat.h)
    const double t0 = now_s();
    std::vector<MicroBatch> micro;
    {
      TraceScope trace(tracer.get(), "data wait", "data");
      for (int a = 0; a < opt.grad_accum; ++a) {
        batches[a] = train.next();
        micro.push_back({batches[a].inputs.data<int32_t>(), batches[a].targets.data<int32_t>(),
                         opt.micro_batch, T});
      }
    }
    const double t_data = now_s() - t0;
    StepStats st = stepper.run(micro, step);
    const double dt = now_s() - t0;
    // st.finite and st.loss are reduced over ranks: every rank decides alike.
    if (st.overflow_skipped) {
      // fp16: an overflow on some rank; every rank skipped and lowered the scale.
      note(fmt::format("step {}: fp16 gradients overflowed at loss scale {:g}; update skipped, "
                       "loss scale now {:g}", step + 1, st.loss_scale, mixed.loss_scale()));
    } else if (!st.finite) {
      ++bad_steps;
      note(fmt::format("step {}: loss {} / grad norm {} is not finite; update skipped",
                                step + 1, st.loss, st.grad_norm));
      MT_CHECK(bad_steps < opt.max_bad_steps, "training diverged: {} consecutive steps with a "
               "non-finite loss or gradient (last at step {}); lower train.lr or check the data",
               bad_steps, step + 1);
    } else {
      bad_steps = 0;
    }
    telemetry::StepTelemetry t;
    t.step = step + 1;
    t.loss = st.loss;
    t.lr = st.lr;
    t.grad_norm = st.grad_norm;
    t.skipped = !st.finite;
    t.time.data_wait_s = t_data;
    t.time.forward_s = st.forward_s;
    t.time.backward_s = st.backward_s;
    t.time.optimizer_s = st.optimizer_s;
    t.time.comm_exposed_s = st.comm.exposed_s;
    t.time.comm_total_s = st.comm.total_s;
    t.time.step_s = dt;
    t.tokens = tokens_per_step;
    t.samples = global_batch;
    t.devices = world;
    t.flops_per_token = flops_per_token;
    t.peak_flops_per_device = peak_flops;
    t.peak_mem_bytes = static_cast<double>(mem_stats().total_peak);
    t.price_per_device_hour = opt.price_per_device_hour;
    if (comm) t.straggler = gather_busy_times(*comm, dt - st.comm.exposed_s);
    if (budget.active()) {
      std::string why;
      if (auto n = budget.after_step(step + 1, dt, st.forward_s, now_s() - t_start, total_steps,
                                     comm, why)) {
        total_steps = *n;
        stepper.set_total_steps(total_steps);
        checkpoints.set_budgeted_steps(total_steps);
        ps.total_steps = total_steps;
      }
      if (!why.empty()) note(why);
    }
    const bool last = step + 1 == total_steps;
    if (val && opt.eval_every > 0 && ((step + 1) % opt.eval_every == 0 || last)) {
      t.val_loss = evaluate(model, *val, opt.eval_batches, comm);
      note(fmt::format("step {:>6} | val loss {:.4f} | train loss {:.4f}", step + 1, *t.val_loss,
                       st.loss));
    }
    if (checkpoints.due(step + 1)) {
      TraceScope trace(tracer.get(), "checkpoint save", "io");
      const double stall =
          checkpoints.save(step + 1, model, stepper.optimizer(), train.position(), own_params,
                           mixed.state());
      note(fmt::format("step {:>6} | checkpoint {}/step_{:08d} ({}; training waited {:.1f} ms)",
                       step + 1, opt.checkpoint.dir, step + 1,
                       opt.checkpoint.async ? "writing in the background" : "written",
                       stall * 1e3));
    }
    const bool save_due = opt.save_every > 0 && (step + 1) % opt.save_every == 0 && !last;
    const bool sample_due =
        opt.sample_every > 0 && (step + 1) % opt.sample_every == 0 && spec.vocab_size() <= 256;
    // ZeRO: rank 0 needs the whole, current model (collective on every rank).
    if (save_due || sample_due) sync.gather_full_parameters();
    if (lead && save_due) save_model_safetensors(opt.run_dir + "/model.safetensors", model);
    if (lead && sample_due) {
      // A short generation so a person sees what the model has learned so far.
      SampleOptions so;
      so.max_new_tokens = 120;
      so.temperature = 0.8f;
      so.top_k = 40;
      Rng rng(opt.seed + static_cast<uint64_t>(step));
      std::vector<int32_t> prompt = {batches[0].inputs.data<int32_t>()[0]};
      std::string text;
      for (int32_t tok : generate(model, prompt, so, rng)) text.push_back(static_cast<char>(tok));
      for (char& ch : text) if (ch == '\n' || ch == '\t') ch = ' ';
      note(fmt::format("step {:>6} | sample: {}", step + 1, text));
    }
    if (save_due || sample_due) sync.release_full_parameters();
    if (lead) {
      nlohmann::json rec = t.to_json();
      if (comm) {
        // Gradient reduction detail: first launch vs the last backward's length
        // shows communication starting while backward still runs.
        rec["comm_buckets"] = st.comm.buckets;
        rec["comm_first_launch_ms"] = st.comm.first_launch_s * 1e3;
        rec["last_backward_ms"] = st.comm.backward_s * 1e3;
      }
      if (st.update_wait_s > 0) rec["ckpt_snapshot_wait_ms"] = st.update_wait_s * 1e3;
      metrics->write(rec);
      tb->add_scalars(t.step, t.scalars());
      summary.add(t);
      t.fill_progress(ps);
      ps.elapsed_s = now_s() - t_start;
      progress->update(ps);
    }
    sum.final_loss = st.loss;
    if (t.val_loss) ps.val_loss = static_cast<float>(*t.val_loss);
    if (crash_after > 0 && step + 1 == crash_after) {
      checkpoints.wait();
      fmt::print(stderr, "MESHTRAIN_TEST_CRASH_AFTER_STEP: rank {} exits after step {}\n", rank,
                 step + 1);
      std::fflush(stdout);
      std::_Exit(3);
    }
  }
  if (progress) progress->finish();
  checkpoints.wait();  // every save complete (index written) before the run ends
  // Replicas that drifted apart would be a bug; checked in debug mode.
  if (opt.dp.verify) sync.verify_replicas();
  const int64_t steps_run = total_steps - std::min(total_steps, start_step);
  sum.steps = std::max(total_steps, start_step);
  sum.seconds = now_s() - t_start;
  sum.tokens_per_s = steps_run > 0 ? static_cast<double>(tokens_per_step) * steps_run / sum.seconds : 0;
  sum.final_val_loss = ps.val_loss;
  sum.model_path = opt.model_out.empty() ? opt.run_dir + "/model.safetensors" : opt.model_out;
  // The trace: each rank writes its file, then rank 0 merges them.
  telemetry::set_global_tracer(nullptr);
  if (tracer->enabled()) {
    tracer->write();
    if (comm) comm->barrier().wait();
    if (lead) {
      const int n = telemetry::merge_trace_dir(opt.run_dir);
      say(fmt::format("trace: {}/trace.json ({} rank file(s); open in https://ui.perfetto.dev)",
                      opt.run_dir, n));
    }
  }
  // Per-rank peaks per category during training, next to the formulas.
  const std::vector<std::vector<double>> peaks = gather_memory_peaks(comm, world, setup_peak);
  sync.gather_full_parameters();  // rank 0 saves the whole model
  if (!lead) return sum;
  if (summary.steps() > 0) fmt::print("{}", summary.text());
  save_model_safetensors(sum.model_path, model);
  const MemStats ms = mem_stats();
  fmt::print("done: {} steps in {} ({:.0f} tokens/s), final loss {:.4f}, val loss {}\n", steps_run,
             ProgressDisplay::format_duration(sum.seconds), sum.tokens_per_s, sum.final_loss,
             sum.final_val_loss >= 0 ? fmt::format("{:.4f}", sum.final_val_loss) : "-");
  // The run's allocator peak also covers setup and, under ZeRO, gathering the
  // whole model to save it; the table below splits training from setup.
  fmt::print("memory (measured): allocator peak {:.1f} MB over the whole run (training predicted "
             "{:.1f} MB, per category below), process peak RSS {:.1f} MB\n", ms.total_peak / 1e6,
             predict_rank_memory(memory_plan(opt, T, world, 0, pred)).total() / 1e6,
             process_peak_rss_bytes() / 1e6);
  {
    std::vector<RankMemory> predicted;
    nlohmann::json mj = nlohmann::json::array();
    for (int r = 0; r < world; ++r) {
      MemoryPlan plan = memory_plan(opt, T, world, r, pred);
      predicted.push_back(predict_rank_memory(plan));
      nlohmann::json row = {{"rank", r}, {"zero_stage", plan.zero_stage}};
      for (size_t c = 0; c < kMemCategoryCount; ++c)
        row["peak"][std::string(mem_category_name(static_cast<MemCategory>(c)))] = peaks[r][c];
      row["training_peak_total"] = peaks[r][kMemCategoryCount];
      row["setup_peak_total"] = peaks[r][kMemCategoryCount + 1];
      const RankMemory& pm = predicted.back();
      row["predicted"] = {{"parameters", pm.params}, {"gradients", pm.grads},
                          {"optimizer", pm.optimizer}, {"activations", pm.activations},
                          {"comm", pm.comm}, {"workspace", pm.workspace}};
      mj.push_back(row);
    }
    fmt::print("{}", memory_report_text(predicted, peaks));
    std::ofstream(opt.run_dir + "/memory.json") << mj.dump(2) << "\n";
  }
  fmt::print("model saved to {}\n", sum.model_path);
  return sum;
}

}  // namespace meshtrain
