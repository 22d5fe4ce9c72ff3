// `meshtrain bench attention`: one layer's causal attention of a preset
// (forward, and backward with its probability recompute) through the fused
// AVX-512 kernels and through the library-GEMM path, interleaved, medians.
// The peer is tools/peers/bench_attention_torch.py (PyTorch's
// scaled_dot_product_attention at the same shapes and threads).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <memory>
#include <optional>
#include <random>
#include <vector>

#include "commands.h"
#include "meshtrain/core/cpu_isa.h"
#include "meshtrain/train/cpu_report.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/threads.h"
#include "meshtrain/kernels/cpu/attention.h"
#include "meshtrain/kernels/cpu/attention_fused.h"
#include "meshtrain/nn/model_registry.h"
#include "meshtrain/plan/transformer_shape.h"
#include "bench_clock.h"

namespace meshtrain::cli {

namespace {
using namespace meshtrain::cpu;

struct BenchAttentionArgs {
  std::string preset = "char-6L";
  int batch = 8, seq = 0, threads = 0, reps = 11;
  bool json = false;
};

template <typename F>
double time_ms(F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

void run_bench_attention(const BenchAttentionArgs& a) {
  // Any transformer preset: attention runs on every query head (a Llama
  // forward folds its grouped K/V heads out to them first).
  const std::shared_ptr<const ModelSpec> spec = model_preset(a.preset);
  const std::optional<plan::TransformerShape> shape = plan::shape_from_description(spec->to_json());
  MT_CHECK(shape, "bench attention: preset {} is not a transformer", a.preset);
  const int64_t context = spec->seq_len(), n_layer = shape->layers;
  const int64_t T = a.seq > 0 ? a.seq : context, B = a.batch, C = shape->hidden, NH = shape->heads,
                hd = C / NH;
  if (a.batch < 1 || a.reps < 1)
    throw UsageError(fmt::format("--batch and --reps must be >= 1 (got {} and {})", a.batch, a.reps));
  if (a.seq < 0 || T > context)
    throw UsageError(fmt::format("--seq must be in 1..{} (the {} context), not {}", context,
                                 a.preset, a.seq));
  if (a.threads < 0) throw UsageError(fmt::format("--threads must be >= 1, not {}", a.threads));
  const int threads = a.threads > 0 ? a.threads : default_thread_count();
  set_thread_count(threads);

  std::vector<float> qkv(B * T * 3 * C), dout(B * T * C), out(B * T * C), lse(B * NH * T),
      dqkv(B * T * 3 * C), ws(threads * attention_workspace_floats(T, hd));
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (float& x : qkv) x = normal(rng);
  for (float& x : dout) x = normal(rng);

  struct Path {
    const char* name;
    void (*fwd)(float*, float*, const float*, int64_t, int64_t, int64_t, int64_t, float*, int);
    void (*bwd)(float*, const float*, const float*, const float*, const float*, int64_t, int64_t,
                int64_t, int64_t, float*, int);
    std::vector<double> f_ms, b_ms;
  };
  std::vector<Path> paths;
  if (attention_fused_available())
    paths.push_back({attention_path(), attention_forward_fused, attention_backward_fused, {}, {}});
  paths.push_back({"gemm", attention_forward_gemm, attention_backward_gemm, {}, {}});

  for (int rep = -2; rep < a.reps; ++rep)  // two untimed rounds, then interleaved
    for (Path& p : paths) {
      const double f = time_ms([&] { p.fwd(out.data(), lse.data(), qkv.data(), B, T, C, NH, ws.data(), threads); });
      const double b = time_ms([&] {
        p.bwd(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T, C, NH, ws.data(), threads);
      });
      if (rep >= 0) p.f_ms.push_back(f), p.b_ms.push_back(b);
    }

  // Executed causal FLOPs: QK^T and PV over the lower triangle forward; the
  // backward recomputes QK^T and adds dP, dQ, dK, dV: 7 products, 7/6 of
  // what the model-FLOP convention (6LCT) credits attention with.
  const double product = 2.0 * B * NH * hd * (T * (T + 1) / 2.0);
  const double fwd_flop = 2 * product, bwd_flop = 5 * product;
  if (!a.json)
    fmt::print("bench attention: {} (L={} H={} hd={}) | batch {} x seq {} | {} thread(s) | one layer, "
               "medians of {} interleaved reps\n  {:12} {:>10} {:>10} {:>10} {:>18}\n",
               a.preset, n_layer, NH, hd, B, T, threads, a.reps, "path", "fwd ms", "bwd ms",
               "GFLOP/s", "x n_layer (ms)");
  if (!a.json) fmt::print("  {}\n", cpu_report_line());
  for (const Path& p : paths) {
    const double f = median_of(p.f_ms), b = median_of(p.b_ms);
    const double gflops = (fwd_flop + bwd_flop) / ((f + b) * 1e-3) * 1e-9;
    if (a.json)
      fmt::print("{}\n", nlohmann::json{{"path", p.name}, {"fwd_ms", f}, {"bwd_ms", b}, {"gflops", gflops},
                                        {"per_step_ms", (f + b) * n_layer}, {"threads", threads},
                                        {"batch", B}, {"seq", T}, {"preset", a.preset}}
                             .dump());
    else
      fmt::print("  {:12} {:10.2f} {:10.2f} {:10.1f} {:18.1f}\n", p.name, f, b, gflops,
                 (f + b) * n_layer);
  }
  if (!a.json && !attention_fused_available())
    fmt::print("  (no fused path at ISA level {}: the fused kernels need avx2 or avx512)\n",
               isa_name(active_isa()));
}
}  // namespace

void register_bench_attention(CLI::App& bench) {
  auto args = std::make_shared<BenchAttentionArgs>();
  auto* c = bench.add_subcommand(
      "attention",
      "Time one layer's causal attention (fused AVX-512/AVX2 kernels vs library GEMMs); GFLOP/s counts "
      "the 7 causal products executed (forward 2, backward 5 with the recompute)");
  c->add_option("--preset", args->preset, "Model preset")->capture_default_str();
  c->add_option("--batch", args->batch, "Micro-batch size B")->capture_default_str();
  c->add_option("--seq", args->seq, "Sequence length T (default: the model's context)");
  c->add_option("--threads", args->threads, "Compute threads (default: cores / local processes)");
  c->add_option("--reps", args->reps, "Timed repetitions")->capture_default_str();
  c->add_flag("--json", args->json, "Print one JSON object per path");
  c->footer("Peer: tools/peers/bench_attention_torch.py (same shapes, torch SDPA is_causal)");
  c->callback([args] { run_bench_attention(*args); });
}

}  // namespace meshtrain::cli
