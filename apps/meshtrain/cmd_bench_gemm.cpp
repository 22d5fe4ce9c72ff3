// `meshtrain bench gemm`: the GEMMs of one training step of a preset (the
// four linear layers and the classifier, forward NT, backward NN for the
// input gradient and TN for the weight gradient) in bf16 with f32
// accumulation next to f32 sgemm on each backend (OpenBLAS, oneDNN),
// interleaved, medians; says which bf16 path ran and which f32 backend
// sgemm() picked for each shape (MESHTRAIN_SGEMM, sgemm_backend.h).
#include <fmt/format.h>

#include <time.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>
#include <vector>

#include "commands.h"
#include "meshtrain/train/cpu_report.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/half.h"
#include "meshtrain/core/threads.h"
#include "meshtrain/kernels/cpu/convert.h"
#include "meshtrain/kernels/cpu/gemm_bf16.h"
#include "meshtrain/kernels/cpu/matmul.h"
#include "meshtrain/kernels/cpu/sgemm_backend.h"
#include "meshtrain/kernels/cpu/sgemm_onednn.h"
#include "meshtrain/nn/model_registry.h"
#include "meshtrain/plan/transformer_shape.h"
#include "bench_clock.h"

namespace meshtrain::cli {

namespace {
struct BenchGemmArgs {
  std::string preset = "char-6L";
  int batch = 8, seq = 0, threads = 0, reps = 7;
  bool json = false;
  std::string clock = "wall";  // or "cpu": process CPU time, steadier on a shared machine
};

struct GemmCase {
  std::string name;
  bool ta, tb;
  int64_t M, N, K;
};

// Wall time, or the process's CPU time: with one thread the CPU time leaves
// out the time other jobs held the core (with more, OpenMP's spin-waits count).
bool g_cpu_clock = false;
double seconds(const std::function<void()>& f) {
  if (g_cpu_clock) {
    const double c0 = process_cpu_s();
    f();
    return process_cpu_s() - c0;
  }
  auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// A block's linear layers and the output head as (name, in, out), the
// products the engine runs (fused q|k|v, and gate|up for Llama).
std::vector<std::pair<std::string, std::pair<int64_t, int64_t>>> linear_layers(
    const plan::TransformerShape& m) {
  const int64_t C = m.hidden, hd = m.hidden / m.heads, F = m.ffn;
  if (m.llama)
    return {{"qkv", {C, (m.heads + 2 * m.kv_heads) * hd}}, {"o_proj", {C, C}},
            {"gate_up", {C, 2 * F}}, {"down", {F, C}}, {"head", {C, m.vocab}}};
  return {{"qkv", {C, 3 * C}}, {"attproj", {C, C}}, {"fc", {C, F}}, {"fcproj", {F, C}},
          {"logits", {C, m.vocab}}};
}

void run_bench_gemm(const BenchGemmArgs& a) {
  const std::shared_ptr<const ModelSpec> spec = model_preset(a.preset);
  const std::optional<plan::TransformerShape> shape = plan::shape_from_description(spec->to_json());
  MT_CHECK(shape, "bench gemm: preset {} is not a transformer the GEMM table knows", a.preset);
  const int64_t T = a.seq > 0 ? a.seq : spec->seq_len(), BT = a.batch * T;
  if (a.batch < 1 || a.reps < 1 || T > spec->seq_len())
    throw UsageError("--batch and --reps must be >= 1 and --seq at most the model context");
  set_thread_count(a.threads > 0 ? a.threads : default_thread_count());
  g_cpu_clock = a.clock == "cpu";
  // out (BT, OC) = in (BT, IC) @ W^T; dIn = dOut @ W; dW (OC, IC) = dOut^T @ In.
  std::vector<GemmCase> cases;
  for (const auto& [name, io] : linear_layers(*shape)) {
    const auto [ic, oc] = io;
    cases.push_back({fmt::format("{} fwd", name), false, true, BT, oc, ic});
    cases.push_back({fmt::format("{} dinp", name), false, false, BT, ic, oc});
    cases.push_back({fmt::format("{} dW", name), true, false, oc, ic, BT});
  }
  const std::string path = cpu::half_gemm_description(cpu::Half::BF16);
  const bool dnn = cpu::onednn_sgemm_available();
  if (!a.json)
    fmt::print("bench gemm: {} GEMMs at batch {} x seq {} | {} thread(s) | {}\n"
               "  f32: MESHTRAIN_SGEMM={} ({}) | {} clock\n"
               "  {:<18} {:>6} {:>6} {:>6}  {:>9} {:>9} {:>16} {:>9} {:>7}\n",
               a.preset, a.batch, T, thread_count(), path,
               cpu::sgemm_policy_name(cpu::sgemm_policy()), cpu::onednn_sgemm_description(), a.clock,
               "gemm (op)", "M", "N", "K", "openblas", "onednn", "sgemm picks", "bf16",
               "bf16 x");
  if (!a.json) fmt::print("  {}\n", cpu_report_line());
  double total_f32 = 0, total_bf16 = 0, total_flop = 0, total_blas = 0, total_dnn = 0;
  int onednn_picks = 0;
  for (const GemmCase& g : cases) {
    const int64_t a_elems = g.M * g.K, b_elems = g.K * g.N;
    std::vector<float> af(a_elems), bf(b_elems), c(g.M * g.N, 0.f);
    for (int64_t i = 0; i < a_elems; ++i) af[i] = 0.01f * static_cast<float>((i * 7919) % 201 - 100);
    for (int64_t i = 0; i < b_elems; ++i) bf[i] = 0.01f * static_cast<float>((i * 104729) % 201 - 100);
    std::vector<uint16_t> ah(a_elems), bh(b_elems);
    cpu::to_half(cpu::Half::BF16, af.data(), ah.data(), a_elems);
    cpu::to_half(cpu::Half::BF16, bf.data(), bh.data(), b_elems);
    const int64_t lda = g.ta ? g.M : g.K, ldb = g.tb ? g.K : g.N;
    auto f32 = [&] { cpu::sgemm(g.ta, g.tb, g.M, g.N, g.K, 1.f, af.data(), lda, bf.data(), ldb, 1.f, c.data(), g.N); };
    auto b16 = [&] {
      cpu::gemm_half(cpu::Half::BF16, g.ta, g.tb, g.M, g.N, g.K, 1.f, ah.data(), lda, bh.data(),
                     ldb, 1.f, c.data(), g.N);
    };
    auto on = [&](cpu::SgemmBackend be) {
      return [&, be] {
        cpu::sgemm_with(be, g.ta, g.tb, g.M, g.N, g.K, 1.f, af.data(), lda, bf.data(), ldb, 1.f,
                        c.data(), g.N);
      };
    };
    const auto blas = on(cpu::SgemmBackend::OpenBlas), onednn = on(cpu::SgemmBackend::OneDnn);
    f32();  // warm-up (packing buffers, primitive creation); under auto, times and picks
    b16();
    if (dnn) onednn();
    const cpu::SgemmBackend picked = cpu::sgemm_backend_for(
        g.ta, g.tb, g.M, g.N, g.K, 1.f, af.data(), lda, bf.data(), ldb, 1.f, c.data(), g.N);
    std::vector<double> tb, td, t16;
    for (int r = 0; r < a.reps; ++r) {  // interleaved
      tb.push_back(seconds(blas));
      if (dnn) td.push_back(seconds(onednn));
      t16.push_back(seconds(b16));
    }
    const double mb = median_of(tb), md = dnn ? median_of(td) : 0;
    const bool picked_dnn = picked == cpu::SgemmBackend::OneDnn;
    onednn_picks += picked_dnn;
    const double flop = 2.0 * g.M * g.N * g.K, m32 = picked_dnn ? md : mb, m16 = median_of(t16);
    total_blas += mb;
    total_dnn += md;
    total_f32 += m32;
    total_bf16 += m16;
    total_flop += flop;
    if (a.json)
      fmt::print("{}\n", nlohmann::json{{"gemm", g.name}, {"M", g.M}, {"N", g.N}, {"K", g.K},
                                        {"trans_a", g.ta}, {"trans_b", g.tb},
                                        {"sgemm_gflops", flop / m32 / 1e9},
                                        {"sgemm_backend", cpu::sgemm_backend_name(picked)},
                                        {"openblas_gflops", flop / mb / 1e9},
                                        {"onednn_gflops", dnn ? flop / md / 1e9 : 0.0},
                                        {"bf16_gflops", flop / m16 / 1e9}, {"ratio", m32 / m16},
                                        {"bf16_path", path}}.dump());
    else
      fmt::print("  {:<18} {:>6} {:>6} {:>6}  {:>9.1f} {:>9} {:>16} {:>9.1f} {:>6.2f}x\n",
                 fmt::format("{} ({}{})", g.name, g.ta ? 'T' : 'N', g.tb ? 'T' : 'N'), g.M, g.N,
                 g.K, flop / mb / 1e9, dnn ? fmt::format("{:.1f}", flop / md / 1e9) : "-",
                 fmt::format("{} {:.1f}", cpu::sgemm_backend_name(picked), flop / m32 / 1e9),
                 flop / m16 / 1e9, m32 / m16);
  }
  if (!a.json) {
    fmt::print("  {:<18} {:>20}  {:>9.1f} {:>9} {:>16} {:>9.1f} {:>6.2f}x  (sum of medians)\n",
               "all", "", total_flop / total_blas / 1e9,
               dnn ? fmt::format("{:.1f}", total_flop / total_dnn / 1e9) : "-",
               fmt::format("{:.1f}", total_flop / total_f32 / 1e9), total_flop / total_bf16 / 1e9,
               total_f32 / total_bf16);
    fmt::print("  sgemm picked onednn for {} of {} shapes; picked vs openblas alone: {:.3f}x\n",
               onednn_picks, cases.size(), total_blas / total_f32);
  }
}
}  // namespace

void register_bench_gemm(CLI::App& bench) {
  auto args = std::make_shared<BenchGemmArgs>();
  auto* c = bench.add_subcommand("gemm", "bf16 GEMM (f32 accumulation) vs f32 sgemm (OpenBLAS, oneDNN) on a preset's shapes");
  c->add_option("--preset", args->preset, "Model preset")->capture_default_str();
  c->add_option("--batch", args->batch, "Micro-batch size B")->capture_default_str();
  c->add_option("--seq", args->seq, "Sequence length T (default: the model's context)");
  c->add_option("--threads", args->threads, "Compute threads (default: cores / local processes)");
  c->add_option("--reps", args->reps, "Timed repetitions of each GEMM")->capture_default_str();
  c->add_flag("--json", args->json, "Print one JSON object per GEMM");
  c->add_option("--clock", args->clock,
                "wall, or cpu: process CPU time (steadier on a busy machine with one thread)")
      ->check(CLI::IsMember({"wall", "cpu"}))
      ->capture_default_str();
  c->callback([args] { run_bench_gemm(*args); });
}

}  // namespace meshtrain::cli
