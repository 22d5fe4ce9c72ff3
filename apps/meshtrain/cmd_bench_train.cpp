// `meshtrain bench train`: a fixed number of training steps on random tokens,
// reported as tokens/s, ms/step, model GFLOP/s and MFU against the measured
// sgemm rate of the same threads, plus measured vs predicted memory.
// With --nproc N it launches N ranks of itself that train data-parallel
// (each on its own random tokens, gradients averaged in buckets during
// backward); rank 0 prints the aggregate tokens/s and the gradient
// communication per step: exposed (waited for after backward) vs total (the
// time the bucket allreduces took, mostly hidden behind backward).
#include <unistd.h>
#include <fmt/format.h>

#include <time.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <vector>

#include "commands.h"
#include "meshtrain/comm/world.h"
#include "meshtrain/core/memory.h"
#include "meshtrain/train/cpu_report.h"
#include "meshtrain/core/rng.h"
#include "meshtrain/core/threads.h"
#include "meshtrain/kernels/cpu/gemm_peak.h"
#include "meshtrain/kernels/cpu/sgemm_backend.h"
#include "meshtrain/launch/launcher.h"
#include "meshtrain/parallel/data_parallel.h"
#include "meshtrain/nn/lora_spec.h"
#include "meshtrain/nn/model_registry.h"
#include "meshtrain/parallel/make_gradient_sync.h"
#include "meshtrain/parallel/mesh.h"
#include "meshtrain/parallel/tp_group.h"
#include "meshtrain/train/train_step.h"
#include "meshtrain/train/memory_model.h"
#include "meshtrain/train/step_time_prediction.h"
#include "meshtrain/train/mixed_precision.h"
#include "bench_precision.h"
#include "recompute_option.h"
#include "bench_clock.h"

namespace meshtrain::cli {

namespace {
struct BenchTrainArgs {
  std::string preset = "char-6L";
  int batch = 8, seq = 0, threads = 0, steps = 10, warmup = 2;
  bool json = false;
  int nproc = 0;
  int tp = 1;  // tensor-parallel ranks per group (the rest data-parallel)
  bool sequence_parallel = false;
  double bucket_mb = 25, first_bucket_mb = 1;
  std::string recompute = "none";
  std::string precision = "fp32";  // bf16 | fp16: compared with fp32 (bench_precision.h)
  int lora_rank = 0;  // > 0: LoRA adapters on the frozen preset (nn/lora_spec.h)
  double lora_alpha = 16;
  std::string lora_targets = "all";
};

void run_bench_train(const BenchTrainArgs& a) {
  std::shared_ptr<const ModelSpec> spec = model_preset(a.preset);
  if (a.lora_rank > 0) {
    LoraConfig lc;
    lc.rank = a.lora_rank;
    lc.alpha = a.lora_alpha;
    lc.targets = LoraConfig::parse_targets(a.lora_targets);
    spec = LoraSpec::make(spec, lc);
  }
  const int T = a.seq > 0 ? a.seq : spec->seq_len();
  if (T > spec->seq_len())
    throw UsageError(fmt::format("--seq {} exceeds the model context {}", T, spec->seq_len()));
  if (a.batch < 1 || a.steps < 1) throw UsageError("--batch and --steps must be >= 1");
  const Recompute recompute = recompute_from_config(a.recompute);
  set_thread_count(a.threads > 0 ? a.threads : default_thread_count());
  const int threads = thread_count();
  // The peak is measured before and after the run and the better one kept, so
  // a burst of outside load during one measurement does not inflate MFU. It is
  // the faster sgemm backend's rate, whichever backends the step uses.
  cpu::SgemmPeak peak = cpu::measure_sgemm_peak();

  mem_reset_peaks();
  // Data parallel inside a job of several ranks (launched by --nproc or mpirun).
  const comm::WorldInfo world = comm::world_from_env();
  comm::Communicator comm;
  parallel::GradientSyncOptions so;
  if (world.size > 1) {
    comm::CommOptions co = comm::CommOptions::from_env();
    co.inline_bytes = 0;  // buckets must never run on the backward thread
    comm = comm::Communicator::from_env(co);
    so.dp = parallel::DataParallelOptions::from_env();
    so.dp.bucket_bytes = static_cast<size_t>(a.bucket_mb * (1 << 20));
    so.dp.first_bucket_bytes = static_cast<size_t>(a.first_bucket_mb * (1 << 20));
  }
  const int world_size = std::max(1, world.size);
  if (a.tp < 1 || world_size % a.tp != 0)
    throw UsageError(fmt::format("--tp {} must divide the {} rank(s)", a.tp, world_size));
  // dp x tp, tp innermost (as `meshtrain train`): each rank its shard.
  parallel::Mesh mesh(comm, {world_size / a.tp, a.tp, 1});
  ModelShard which{mesh.rank(parallel::Axis::TP), a.tp};
  which.sequence_parallel = a.sequence_parallel;
  const std::shared_ptr<const ModelSpec> shard = a.tp > 1 ? spec->sharded(which) : spec;
  // LoRA runs train in the given precision directly (no fp32 side by side).
  const Precision precision = a.lora_rank > 0 ? precision_from_name(a.precision) : Precision::FP32;
  so.precision = precision;
  parallel::SyncedModel synced = parallel::make_synced_model(mesh.comm(parallel::Axis::DP), shard, so);
  parallel::GradientSync& sync = *synced.sync;
  const bool dp = sync.comm() != nullptr;
  const int ranks = dp ? sync.comm()->size() : 1;  // data-parallel ranks
  const bool lead = world.rank == 0;
  Model& model = *synced.model;
  std::shared_ptr<parallel::CommTensorParallelGroup> tp_group;
  if (a.tp > 1) {
    tp_group = parallel::make_tp_group(mesh.comm(parallel::Axis::TP));
    model.set_tensor_parallel_group(tp_group);
  }
  model.set_recompute(recompute);
  model.init_weights(1);
  sync.after_resume();  // rank 0's weights on every rank
  LrSchedule sched;
  sched.max_lr = 3e-4f;
  sched.kind = "constant";
  MixedPrecision mixed(model, MixedPrecisionOptions{precision, {}});
  TrainStep stepper(model, sync, OptimizerConfig{}, sched, 1.0f);
  stepper.set_mixed_precision(&mixed);
  if (a.tp > 1) stepper.set_tensor_parallel(&mesh.comm(parallel::Axis::TP), tp_group.get());
  // Each data-parallel rank its own tokens; a tp group shares them.
  Rng rng(1234 + static_cast<uint64_t>(mesh.rank(parallel::Axis::DP)));
  std::vector<int32_t> tok(static_cast<size_t>(a.batch) * (T + 1));
  // A model of dense samples (images) takes random values and labels instead.
  const bool dense = spec->input() == ModelSpec::Input::Dense;
  int64_t sample = 1;
  for (int64_t d : spec->sample_shape()) sample *= d;
  std::vector<float> features(dense ? static_cast<size_t>(a.batch * sample) : 0);
  std::vector<int32_t> labels(dense ? static_cast<size_t>(a.batch) : 0);
  std::vector<double> step_s, fwd_s, bwd_s, opt_s, cpu_s, exposed_s, comm_s, tp_s;
  int buckets = 0;
  float loss = 0;
  for (int s = 0; s < a.warmup + a.steps; ++s) {
    for (auto& t : tok) t = static_cast<int32_t>(rng.below(spec->vocab_size()));
    std::vector<int32_t> in(a.batch * T), tg(a.batch * T);
    for (int b = 0; b < a.batch; ++b)
      for (int t = 0; t < T; ++t) {
        in[b * T + t] = tok[b * (T + 1) + t];
        tg[b * T + t] = tok[b * (T + 1) + t + 1];
      }
    MicroBatch mb{in.data(), tg.data(), a.batch, T};
    if (dense) {
      for (auto& v : features) v = rng.normal();
      for (auto& l : labels) l = static_cast<int32_t>(rng.below(spec->vocab_size()));
      mb = MicroBatch{nullptr, labels.data(), a.batch, 1, features.data()};
    }
    const double c0 = process_cpu_s();
    auto st = stepper.run({mb}, s);
    const double c1 = process_cpu_s();
    loss = st.loss;
    if (s >= a.warmup) {
      step_s.push_back(st.forward_s + st.backward_s + st.comm.exposed_s + st.tp_comm_s +
                       st.optimizer_s);
      exposed_s.push_back(st.comm.exposed_s);
      tp_s.push_back(st.tp_comm_s);
      comm_s.push_back(st.comm.total_s);
      buckets = st.comm.buckets;
      fwd_s.push_back(st.forward_s);
      bwd_s.push_back(st.backward_s);
      opt_s.push_back(st.optimizer_s);
      cpu_s.push_back(c1 - c0);
    }
  }
  const cpu::SgemmPeak peak2 = cpu::measure_sgemm_peak();
  peak.openblas_gflops = std::max(peak.openblas_gflops, peak2.openblas_gflops);
  peak.onednn_gflops = std::max(peak.onednn_gflops, peak2.onednn_gflops);
  const double peak_gflops = peak.best();
  const double med = median_of(step_s);
  // Aggregate over data-parallel ranks: each processes batch x seq tokens per
  // step (a tp group together).
  const double tokens = static_cast<double>(a.batch) * T * ranks;
  const double tok_s = tokens / med;
  const double gflops = spec->flops_per_token(T) * tok_s / 1e9;
  const double mfu = gflops / (peak_gflops * ranks * a.tp);
  // Parameters, gradients and optimizer state this rank holds (its shard).
  const int64_t model_state_bytes =
      mem_stats().peak[static_cast<size_t>(MemCategory::Parameters)] +
      mem_stats().peak[static_cast<size_t>(MemCategory::Gradients)] +
      mem_stats().peak[static_cast<size_t>(MemCategory::OptimizerState)];
  if (!lead) return;
  const MemStats ms = mem_stats();
  const MemoryPrediction pred = predict_training_memory(model.spec(), a.batch, T, threads, recompute);
  const double measured_mb = ms.total_peak / 1e6;
  const double act_peak_mb = ms.peak[static_cast<size_t>(MemCategory::Activations)] / 1e6;
  const double rss_mb = process_peak_rss_bytes() / 1e6;

  // The planner's prediction of this step on this machine (the calibration
  // `meshtrain plan --calibrate` wrote), and its error.
  RunLayout run;
  run.micro_batch = a.batch, run.seq = T, run.dp = ranks, run.tp = a.tp;
  run.sequence_parallel = a.sequence_parallel && a.tp > 1, run.recompute = recompute;
  run.precision = precision, run.threads_per_rank = threads;
  std::string why_not;
  const std::optional<StepTimePrediction> predicted = predict_step_time(*spec, run, why_not);
  if (a.json) {
    nlohmann::json j = {{"preset", a.preset}, {"batch", a.batch}, {"seq", T}, {"threads", threads},
                        {"steps", a.steps}, {"ms_per_step", med * 1e3},
                        {"forward_ms", median_of(fwd_s) * 1e3}, {"backward_ms", median_of(bwd_s) * 1e3},
                        {"optimizer_ms", median_of(opt_s) * 1e3}, {"tokens_per_s", tok_s},
                        {"samples_per_s", static_cast<double>(a.batch) * ranks / med},
                        {"cpu_ms_per_step", median_of(cpu_s) * 1e3},
                        {"tokens_per_cpu_s", tokens / median_of(cpu_s)},
                        {"model_gflops", gflops}, {"sgemm_peak_gflops", peak_gflops},
                        {"mfu", mfu}, {"loss", loss}, {"recompute", recompute.name()},
                        {"activations_predicted_mb", pred.activations / 1e6},
                        {"activations_allocator_peak_mb", act_peak_mb},
                        {"memory_predicted_mb", pred.total_bytes() / 1e6},
                        {"memory_allocator_peak_mb", measured_mb}, {"memory_rss_peak_mb", rss_mb},
                        {"sgemm", cpu::sgemm_summary()}, {"cpu_dispatch", cpu_report_json()},
                        {"sgemm_policy", cpu::sgemm_policy_name(cpu::sgemm_policy())},
                        {"sgemm_peak_openblas_gflops", peak.openblas_gflops},
                        {"sgemm_peak_onednn_gflops", peak.onednn_gflops},
                        {"sgemm_peak_backend", peak.best_backend()}};
    nlohmann::json shapes = nlohmann::json::array();
    int onednn_shapes = 0;
    for (const cpu::SgemmChoice& c : cpu::sgemm_choices()) {
      onednn_shapes += c.backend == cpu::SgemmBackend::OneDnn;
      shapes.push_back({{"op", fmt::format("{}{}", c.trans_a ? 'T' : 'N', c.trans_b ? 'T' : 'N')},
                        {"M", c.M}, {"N", c.N}, {"K", c.K}, {"beta", c.accumulate ? 1 : 0},
                        {"bias", c.bias},
                        {"backend", cpu::sgemm_backend_name(c.backend)},
                        {"openblas_ms", c.openblas_s * 1e3}, {"onednn_ms", c.onednn_s * 1e3}});
    }
    j["sgemm_timed_shapes"] = shapes.size();
    j["sgemm_onednn_shapes"] = onednn_shapes;
    j["sgemm_shapes"] = shapes;
    if (predicted) {
      j["predicted_ms"] = predicted->step_s() * 1e3;
      j["prediction_error"] = predicted->step_s() / med - 1;
    } else {
      j["prediction"] = why_not;
    }
    j["tp"] = a.tp;
    j["sequence_parallel"] = a.sequence_parallel && a.tp > 1;
    j["model_state_mb"] = model_state_bytes / 1e6;
    j["precision"] = precision_name(precision);
    j["trained_params"] = spec->num_params();
    if (a.lora_rank > 0) j["lora_rank"] = a.lora_rank;
    if (a.tp > 1) j["tp_comm_ms"] = median_of(tp_s) * 1e3;
    if (dp || a.tp > 1) j["nproc"] = ranks * a.tp;
    if (dp) {
      j["comm_buckets"] = buckets;
      j["comm_exposed_ms"] = median_of(exposed_s) * 1e3;
      j["comm_total_ms"] = median_of(comm_s) * 1e3;
    }
    fmt::print("{}\n", j.dump());
    return;
  }
  fmt::print("bench train: {} | batch {} x seq {} | {} thread(s) | recompute {}{}{}\n", spec->describe(),
             a.batch, T, threads, recompute.name(), dp ? fmt::format(" per rank | {} ranks data-parallel ({})", ranks,
                                       sync.comm()->transport()) : "",
             a.tp > 1 ? fmt::format(" | tp {}{}", a.tp, a.sequence_parallel ? " (sequence parallel)" : "") : "");
  fmt::print("  model state (this rank)    {:10.1f} MB  (parameters, gradients, optimizer)\n",
             model_state_bytes / 1e6);
  fmt::print("  sgemm peak (same threads)  {:10.1f} GFLOP/s  ({}; openblas {:.1f}{})\n", peak_gflops,
             peak.best_backend(), peak.openblas_gflops,
             peak.onednn_gflops > 0 ? fmt::format(", onednn {:.1f}", peak.onednn_gflops) : "");
  fmt::print("  {}\n", cpu_report_line());
  fmt::print("  {}\n", cpu::sgemm_summary());
  for (const cpu::SgemmChoice& c : cpu::sgemm_choices())
    fmt::print("    {}{} {:>5} x {:>5} x {:>5} beta {}{}: {:<8} (openblas {:7.2f} ms, onednn {:7.2f} ms)\n",
               c.trans_a ? 'T' : 'N', c.trans_b ? 'T' : 'N', c.M, c.N, c.K, c.accumulate ? 1 : 0,
               c.bias ? " + bias" : "       ", cpu::sgemm_backend_name(c.backend),
               c.openblas_s * 1e3, c.onednn_s * 1e3);
  fmt::print("  step (median of {})        {:10.2f} ms  (fwd {:.2f}, bwd {:.2f}, optim {:.2f})\n",
             a.steps, med * 1e3, median_of(fwd_s) * 1e3, median_of(bwd_s) * 1e3, median_of(opt_s) * 1e3);
  if (predicted)
    fmt::print("  step predicted (plan)      {}\n", step_time_line(*predicted, med));
  else
    fmt::print("  step predicted (plan)      none: {}\n", why_not);
  const char* unit = dense ? "samples" : "tokens";  // a dense model: one sample, one "token"
  fmt::print("  throughput                 {:10.{}f} {}/s  (CPU time {:.2f} ms/step: {:.{}f} {} per CPU-second)\n",
             tok_s, dense ? 2 : 0, unit, median_of(cpu_s) * 1e3, tokens / median_of(cpu_s),
             dense ? 2 : 0, unit);
  if (a.tp > 1)
    fmt::print("  tp collectives / step      {:10.2f} ms  (blocking; outside fwd and bwd above)\n",
               median_of(tp_s) * 1e3);
  if (dp)
    fmt::print("  gradient allreduce / step  {:10.2f} ms exposed (waited after backward) of {:.2f} ms "
               "total in {} bucket(s)\n", median_of(exposed_s) * 1e3, median_of(comm_s) * 1e3, buckets);
  fmt::print("  model FLOPs                {:10.1f} GFLOP/s  ({:.1f} MFLOP/{})\n", gflops,
             spec->flops_per_token(T) / 1e6,
             dense ? "sample = 6 x multiply-adds" : "token = 6N + 6LCT");
  fmt::print("  MFU vs measured sgemm peak {:10.1f} %\n", mfu * 100);
  fmt::print("  memory predicted           {:10.1f} MB  (params {:.1f}, grads {:.1f}, optimizer {:.1f}, activations {:.1f})\n",
             pred.total_bytes() / 1e6, pred.params / 1e6, pred.grads / 1e6, pred.optimizer / 1e6,
             pred.activations / 1e6);
  fmt::print("  activations                {:10.1f} MB  allocator peak (predicted {:.1f})\n", act_peak_mb,
             pred.activations / 1e6);
  fmt::print("  memory measured            {:10.1f} MB  allocator peak ({:+.1f}% vs predicted), process peak RSS {:.1f} MB\n",
             measured_mb, (measured_mb / (pred.total_bytes() / 1e6) - 1) * 100, rss_mb);
}
}  // namespace

void register_bench_train(CLI::App& bench) {
  auto args = std::make_shared<BenchTrainArgs>();
  auto* c = bench.add_subcommand("train", "Time training steps; print tokens/s, MFU and memory");
  c->add_option("--preset", args->preset, "Model preset")->capture_default_str();
  c->add_option("--batch", args->batch, "Micro-batch size B")->capture_default_str();
  c->add_option("--seq", args->seq, "Sequence length T (default: the model's context)");
  c->add_option("--threads", args->threads, "Compute threads (default: cores / local processes)");
  c->add_option("--steps", args->steps, "Timed steps")->capture_default_str();
  c->add_option("--warmup", args->warmup, "Untimed warm-up steps")->capture_default_str();
  c->add_flag("--json", args->json, "Print one JSON object");
  c->add_option("--nproc", args->nproc, "Launch N ranks training data-parallel (aggregate tokens/s)");
  c->add_option("--tp", args->tp, "Tensor-parallel ranks per group (--nproc a multiple of it)")
      ->capture_default_str();
  c->add_flag("--sequence-parallel", args->sequence_parallel,
              "With --tp: split the norms and residual stream over the tp group too");
  c->add_option("--bucket-mb", args->bucket_mb, "Gradient bucket size (MiB)")->capture_default_str();
  c->add_option("--first-bucket-mb", args->first_bucket_mb, "First gradient bucket (MiB)")
      ->capture_default_str();
  c->add_option("--precision", args->precision,
                "fp32, or bf16 | fp16: train fp32 and that mixed precision side by side "
                "(single process, interleaved) and print both")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}))
      ->capture_default_str();
  c->add_option("--lora-rank", args->lora_rank,
                 "Train LoRA adapters of this rank on the frozen preset (0: full training)")
      ->capture_default_str();
  c->add_option("--lora-alpha", args->lora_alpha, "LoRA scale numerator (alpha / rank)")
      ->capture_default_str();
  c->add_option("--lora-targets", args->lora_targets, "LoRA matrices: all, or names (q_proj,v_proj)")
      ->capture_default_str();
  c->add_option("--recompute", args->recompute,
                "Activation recompute: none | full | every:K | selective")
      ->capture_default_str();
  c->callback([args] {
    const comm::WorldInfo w = comm::world_from_env();
    if (args->precision != "fp32" && args->lora_rank == 0 && (args->nproc > 1 || w.size > 1))
      throw UsageError("--precision compares with fp32 in one process; drop --nproc");
    if (args->nproc > 1 && w.source == "none") {
      // Run N ranks of this same command (without --nproc).
      launch::LaunchOptions lo;
      lo.nproc = args->nproc;
      lo.prefix_output = false;
      char self[4096];
      const ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
      lo.command = {len > 0 ? std::string(self, static_cast<size_t>(len)) : "/proc/self/exe",
                    "bench", "train", "--preset", args->preset, "--batch", std::to_string(args->batch),
                    "--seq", std::to_string(args->seq), "--threads", std::to_string(args->threads),
                    "--steps", std::to_string(args->steps), "--warmup", std::to_string(args->warmup),
                    "--bucket-mb", fmt::format("{}", args->bucket_mb),
                    "--first-bucket-mb", fmt::format("{}", args->first_bucket_mb),
                    "--recompute", args->recompute, "--tp", std::to_string(args->tp)};
      if (args->sequence_parallel) lo.command.push_back("--sequence-parallel");
      if (args->json) lo.command.push_back("--json");
      const launch::LaunchResult r = launch::run_local(lo);
      if (r.exit_code != 0) throw Error(fmt::format("bench failed: {}", r.message));
      return;
    }
    if (args->precision != "fp32" && args->lora_rank == 0) {
      run_bench_precision({args->preset, args->batch, args->seq, args->threads, args->steps,
                           args->warmup, args->json, args->recompute, args->precision});
      return;
    }
    run_bench_train(*args);
  });
}

}  // namespace meshtrain::cli
