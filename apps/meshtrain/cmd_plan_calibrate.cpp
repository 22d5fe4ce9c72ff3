// `meshtrain plan --calibrate`: measures this machine into a cluster file the
// planner reads (plan/cluster.h), where one "GPU" is one rank with its
// threads: the GEMM rate by size in f32 and bf16 (fitted to the planner's
// efficiency curve), the memory bandwidth, the shared-memory collectives'
// alpha-beta (`bench comm --calibrate` over real ranks), and from reference
// training steps (`bench train`) the constants only a real step shows: the
// memory-bound traffic of f32 and bf16 steps and the cost of full recompute. `train` and `bench train` then print
// their predicted step time beside the measured one.
#include "cmd_plan_calibrate.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "meshtrain/comm/cost_model.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/half.h"
#include "meshtrain/core/threads.h"
#include "meshtrain/kernels/cpu/gemm_bf16.h"
#include "meshtrain/kernels/cpu/matmul.h"
#include "meshtrain/nn/model_registry.h"
#include "meshtrain/plan/calibration_fit.h"
#include "meshtrain/train/memory_model.h"
#include "meshtrain/train/step_time_prediction.h"
#include "bench_clock.h"

namespace meshtrain::cli {

namespace {

// Best of `reps` (the least disturbed run), after one warm-up.
template <class F>
double best_seconds(int reps, F&& f) {
  f();
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    const double t0 = now_s();
    f();
    best = std::min(best, now_s() - t0);
  }
  return best;
}

// GFLOP/s of C (M, N) = A (M, K) B^T (the layout of a linear layer's forward).
double gemm_gflops(bool bf16, int64_t M, int64_t N, int64_t K) {
  std::vector<float> a(M * K, 0.5f), b(N * K, 0.25f), c(M * N);
  std::vector<uint16_t> ah(a.size(), f32_to_bf16(0.5f)), bh(b.size(), f32_to_bf16(0.25f));
  const double s = best_seconds(3, [&] {
    if (bf16)
      cpu::gemm_half(cpu::Half::BF16, false, true, M, N, K, 1.0f, ah.data(), K, bh.data(), K, 0.0f,
                     c.data(), N);
    else
      cpu::sgemm(false, true, M, N, K, 1.0f, a.data(), K, b.data(), K, 0.0f, c.data(), N);
  });
  return 2.0 * M * N * K / s / 1e9;
}

// A copy over the rank's threads: bytes read + written per second.
double copy_gbps(int threads) {
  const size_t n = size_t{32} << 20;  // 128 MB per buffer, well past the caches
  std::vector<float> src(n, 1.0f), dst(n, 0.0f);
  const double s = best_seconds(3, [&] {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t i = 0; i < static_cast<int64_t>(n); ++i) dst[i] = src[i];
  });
  return 2.0 * n * sizeof(float) / s / 1e9;
}

std::string self_exe() {
  char buf[4096];
  const ssize_t len = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  MT_CHECK(len > 0, "cannot find this program's path (/proc/self/exe)");
  return std::string(buf, static_cast<size_t>(len));
}

std::string quote(const std::string& s) { return "'" + s + "'"; }

// Runs a command, returning its standard output; throws with its output on failure.
std::string run_capture(const std::string& cmd) {
  std::unique_ptr<FILE, int (*)(FILE*)> p(popen((cmd + " 2>&1").c_str(), "r"), pclose);
  MT_CHECK(p, "cannot run {}", cmd);
  std::string out;
  char buf[4096];
  while (size_t k = fread(buf, 1, sizeof(buf), p.get())) out.append(buf, k);
  const int rc = pclose(p.release());
  MT_CHECK(rc == 0, "calibration step failed: {}\n{}", cmd, out);
  return out;
}

// Runs `cmd` in n processes at once; their standard outputs, in order.
std::vector<std::string> run_concurrently(const std::string& cmd, int n) {
  std::vector<FILE*> procs;
  for (int i = 0; i < n; ++i) {
    FILE* p = popen((cmd + " 2>&1").c_str(), "r");
    if (!p) break;  // the ones started are still waited for below
    procs.push_back(p);
  }
  std::vector<std::string> outs(procs.size());
  int failed = -1;
  for (size_t i = 0; i < procs.size(); ++i) {
    char buf[4096];
    while (size_t k = fread(buf, 1, sizeof(buf), procs[i])) outs[i].append(buf, k);
    if (pclose(procs[i]) != 0 && failed < 0) failed = static_cast<int>(i);
  }
  MT_CHECK(static_cast<int>(procs.size()) == n, "cannot start {} copies of {}", n, cmd);
  MT_CHECK(failed < 0, "calibration step failed: {} (copy {} of {} at once)\n{}", cmd, failed + 1, n,
           failed < 0 ? "" : outs[static_cast<size_t>(failed)]);
  return outs;
}

}  // namespace

void run_plan_calibrate(const CalibrateOptions& o) {
  if (o.ranks < 1) throw UsageError(fmt::format("--ranks must be >= 1 (got {})", o.ranks));
  if (o.batch < 1) throw UsageError(fmt::format("--reference-batch must be >= 1 (got {})", o.batch));
  // Before anything is measured: an unknown preset fails now, not after a minute.
  const std::shared_ptr<const ModelSpec> spec = model_preset(o.reference);
  const int threads = o.threads > 0 ? o.threads : std::max(1, default_thread_count() / o.ranks);
  set_thread_count(threads);
  const std::string out = o.out.empty() ? default_machine_file() : o.out;
  fmt::print("calibrating this machine for {} rank(s) x {} thread(s) -> {}\n", o.ranks, threads, out);

  plan::ClusterSpec m;
  m.name = "this-machine";
  m.gpus_per_node = o.ranks;
  m.threads_per_device = threads;
  m.usable_fraction = 0.9;
  m.memory_gb = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE) / 1e9 / o.ranks;
  // The reference steps run `ranks` copies at once (below): a reference that
  // cannot fit fails now, before a minute of GEMM sweeps, not at its allocation.
  for (Precision p : {Precision::FP32, Precision::BF16}) {
    const double need_gb =
        predict_training_memory(*spec, o.batch, spec->seq_len(), threads, {}, p).total_bytes() / 1e9;
    MT_CHECK(need_gb <= 0.9 * m.memory_gb,
             "--reference-model {} at batch {} needs about {:.1f} GB per rank in {} (predicted), more than "
             "90% of this machine's {:.1f} GB per rank for {} rank(s); calibrate with a smaller reference "
             "(e.g. --reference-model char-6L) or a smaller --reference-batch",
             o.reference, o.batch, need_gb, p == Precision::FP32 ? "f32" : "bf16", m.memory_gb,
             o.ranks);
  }

  // GEMMs: 1024 x 1024 outputs over inner sizes n; the rate fitted to
  // peak n / (n + half) (plan::fit_gemm_curve).
  for (bool bf16 : {false, true}) {
    std::vector<plan::RatePoint> points;
    for (int64_t n : {32, 64, 128, 256, 512, 1024})
      points.push_back({static_cast<double>(n), gemm_gflops(bf16, 1024, 1024, n)});
    const plan::GemmCurve fit = plan::fit_gemm_curve(points);
    fmt::print("  {} GEMM: ", bf16 ? "bf16" : "f32 ");
    for (const auto& p : points) fmt::print("n {} {:.1f}  ", p.n, p.gflops);
    fmt::print("GFLOP/s -> peak {:.1f}, half-rate size {:.0f}\n", fit.peak_gflops, fit.half_dim);
    if (bf16) {
      m.bf16_tflops = fit.peak_gflops / 1e3;
      // One curve shape for both precisions: the f32 fit's (what most runs use).
    } else {
      m.fp32_tflops = fit.peak_gflops / 1e3;
      m.gemm_half_dim = fit.half_dim;
    }
  }
  m.gemm_peak_fraction = 1.0;  // the fitted peak is the achievable one
  m.memory_gbps = copy_gbps(threads);
  fmt::print("  memory: {:.1f} GB/s copy over {} thread(s)\n", m.memory_gbps, threads);

  // Collectives over real ranks (shared memory): the ring allreduce's
  // alpha-beta as bench comm --calibrate measures it.
  m.link_efficiency = 1.0;  // measured, not a data-sheet rate
  if (o.ranks > 1) {
    const std::string cost_file =
        (std::filesystem::temp_directory_path() / fmt::format("meshtrain_calibrate_{}.json", getpid())).string();
    run_capture(fmt::format("MESHTRAIN_COMM_COST_FILE={} {} bench comm --calibrate -n {}", quote(cost_file),
                            quote(self_exe()), o.ranks));
    const comm::CostModel cost = comm::CostModel::load(cost_file);
    std::filesystem::remove(cost_file);
    const comm::AlphaBeta ab = cost.get("shm", "ring");
    m.intra_alpha_us = m.inter_alpha_us = ab.alpha_us;
    m.intra_gbps = m.inter_gbps = 1e-3 / ab.beta_us_per_byte;  // us per byte -> GB/s
    fmt::print("  allreduce (shm ring, {} ranks): alpha {:.2f} us per step, {:.2f} GB/s\n", o.ranks,
               ab.alpha_us, m.intra_gbps);
  } else {
    m.intra_gbps = m.inter_gbps = m.memory_gbps;
  }

  // The constants only a real step shows, from the reference model on one
  // rank (the predicted step is linear in each): the memory-bound traffic of
  // an f32 and of a bf16 step (bench train runs the two interleaved), then
  // what full recompute costs in forwards.
  RunLayout run;
  run.micro_batch = o.batch, run.seq = spec->seq_len(), run.threads_per_rank = threads;
  auto predicted = [&](const RunLayout& rl) {
    std::string why;
    const auto p = predict_step_time(*spec, rl, m, why);
    MT_CHECK(p, "the reference model {} cannot be predicted: {}", o.reference, why);
    return p->step_s();
  };
  const std::string bench_cmd = fmt::format(
      "MESHTRAIN_MACHINE_FILE=/nonexistent {} bench train --preset {} --batch {} --threads {} "
      "--steps 6 --json", quote(self_exe()), o.reference, o.batch, threads);
  const auto json_of = [](const std::string& text) {
    return nlohmann::json::parse(text.substr(text.rfind("\n{") + 1));
  };
  auto bench = [&](const std::string& extra) { return json_of(run_capture(bench_cmd + " " + extra)); };
  const nlohmann::json mixed = bench("--precision bf16");
  const double measured_f32 = mixed.at("fp32").at("ms_per_step").get<double>() / 1e3;
  const double measured_bf16 = mixed.at("bf16").at("ms_per_step").get<double>() / 1e3;
  RunLayout half = run;
  half.precision = Precision::BF16;
  m.activation_traffic = m.activation_traffic_fp32 = 0;
  const double f32_at_0 = predicted(run), bf16_at_0 = predicted(half);
  m.activation_traffic = m.activation_traffic_fp32 = 1;
  m.activation_traffic_fp32 = plan::fit_traffic(f32_at_0, predicted(run), measured_f32);
  m.activation_traffic = plan::fit_traffic(bf16_at_0, predicted(half), measured_bf16);
  fmt::print("  reference steps ({} batch {} x {}): f32 {:.1f} ms, bf16 {:.1f} ms measured -> memory-bound "
             "traffic {:.2f} (f32) and {:.2f} (bf16) x the stored activations\n", o.reference, o.batch,
             run.seq, measured_f32 * 1e3, measured_bf16 * 1e3, m.activation_traffic_fp32,
             m.activation_traffic);
  RunLayout full = run;
  full.recompute = Recompute::full();
  const double measured_full = bench("--recompute full").at("ms_per_step").get<double>() / 1e3;
  m.recompute_forward_fraction = 0;
  const double full_at_0 = predicted(full);
  m.recompute_forward_fraction = 1;
  m.recompute_forward_fraction = plan::fit_traffic(full_at_0, predicted(full), measured_full);
  fmt::print("  full recompute: {:.1f} ms measured -> it costs {:.2f} forwards\n", measured_full * 1e3,
             m.recompute_forward_fraction);

  // The same f32 step with every rank running it at once (independent
  // processes, no communication): what sharing the machine costs each rank.
  // Both sides are the same command, so its own set-up (an sgemm peak probe)
  // is in both.
  if (o.ranks > 1) {
    const double alone = json_of(run_capture(bench_cmd)).at("ms_per_step").get<double>() / 1e3;
    double concurrent = 0;
    for (const std::string& text : run_concurrently(bench_cmd, o.ranks))
      concurrent += json_of(text).at("ms_per_step").get<double>() / 1e3 / o.ranks;
    m.concurrent_slowdown = std::max(1.0, concurrent / alone);
    fmt::print("  {} ranks at once: {:.1f} ms per step each -> {:.3f}x slower than alone\n", o.ranks,
               concurrent * 1e3, m.concurrent_slowdown);
  }

  const std::time_t t = std::time(nullptr);
  char when[32];
  std::strftime(when, sizeof(when), "%Y-%m-%d %H:%M", std::gmtime(&t));
  m.calibrated = fmt::format(
      "meshtrain plan --calibrate --ranks {} --reference-model {} --reference-batch {} ({} threads per "
      "rank), {} UTC", o.ranks, o.reference, o.batch, threads, when);
  std::filesystem::create_directories(std::filesystem::absolute(out).parent_path());
  std::ofstream(out) << m.to_json().dump(2) << "\n";
  fmt::print("wrote {} (use it with --cluster {}; train and bench train read it for their predicted "
             "step time)\n", out, out);
}

}  // namespace meshtrain::cli
