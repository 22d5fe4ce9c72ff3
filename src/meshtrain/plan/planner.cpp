#include "meshtrain/plan/planner.h"
#include "meshtrain/plan/stage_cut.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cmath>

#include "meshtrain/core/error.h"

namespace meshtrain::plan {

namespace {

// Ring collective over n ranks moving `bytes` per rank: 2 (n-1)/n of them
// each way for an allreduce (half for reduce-scatter or allgather).
double ring_s(double bytes, int64_t n, double gbps, double alpha_us, double factor, double efficiency) {
  if (n <= 1) return 0;
  const double nn = static_cast<double>(n);
  return factor * (nn - 1) / nn * bytes / (efficiency * gbps * 1e9) +
         factor * (nn - 1) * alpha_us * 1e-6;
}

std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> out;
  for (int64_t d = 1; d <= n; ++d)
    if (n % d == 0) out.push_back(d);
  return out;
}

}  // namespace

double gemm_efficiency(const ClusterSpec& c, double n) {
  return c.gemm_peak_fraction * n / (n + c.gemm_half_dim);
}

EngineTraits EngineTraits::megatron_2021() {
  EngineTraits t;
  t.name = "megatron-lm 2021-22";
  t.overlap_dp_with_backward = false;
  t.causal_attention_skips_masked = false;
  t.gradient_wire_bytes = 2;
  return t;
}

bool LayoutFilter::admits(const Layout& l) const {
  return (dp == 0 || l.dp == dp) && (tp == 0 || l.tp == tp) && (pp == 0 || l.pp == pp) &&
         (micro_batch == 0 || l.micro_batch == micro_batch) && (chunks == 0 || l.chunks == chunks) &&
         (zero_stage < 0 || l.zero_stage == zero_stage) && (!recompute || l.recompute == *recompute) &&
         (!sequence_parallel || l.sequence_parallel == *sequence_parallel);
}

std::string LayoutFilter::describe() const {
  std::vector<std::string> parts;
  if (dp) parts.push_back(fmt::format("dp {}", dp));
  if (tp) parts.push_back(fmt::format("tp {}", tp));
  if (pp) parts.push_back(fmt::format("pp {}", pp));
  if (chunks) parts.push_back(fmt::format("chunks {}", chunks));
  if (micro_batch) parts.push_back(fmt::format("micro-batch {}", micro_batch));
  if (zero_stage >= 0) parts.push_back(fmt::format("zero {}", zero_stage));
  if (recompute) parts.push_back(fmt::format("recompute {}", recompute_policy_name(*recompute)));
  if (sequence_parallel) parts.push_back(*sequence_parallel ? "sp" : "no sp");
  return fmt::format("{}", fmt::join(parts, ", "));
}

std::string Layout::describe() const {
  return fmt::format("dp {} x tp {} x pp {}{}, micro-batch {} x {}, zero {}, recompute {}{}", dp, tp,
                     pp, chunks > 1 ? fmt::format(" (interleaved x{})", chunks) : "", micro_batch,
                     micro_batches, zero_stage, recompute_policy_name(recompute),
                     sequence_parallel ? ", sp" : "");
}

double optimizer_state_bytes(const std::string& optimizer, bool momentum) {
  if (optimizer == "adamw" || optimizer == "lamb") return 4 + 2 * 4;
  if (optimizer == "sgd" || optimizer == "lars") return 4 + (momentum ? 4 : 0);
  throw UsageError(fmt::format("optimizer \"{}\" is not one of adamw, sgd, lars, lamb", optimizer));
}

PlanRow evaluate_layout(const PlanRequest& r, const Layout& l) {
  const TransformerShape& m = r.model;
  const ClusterSpec& c = r.cluster;
  const double s = static_cast<double>(r.seq > 0 ? r.seq : m.seq), h = static_cast<double>(m.hidden);
  const double b = static_cast<double>(l.micro_batch), t = static_cast<double>(l.tp);
  const double L = static_cast<double>(m.layers);
  // The stages as the engine cuts them (plan/stage_cut.h): by model FLOPs,
  // the head counted on the last. Memory is the first pipeline rank's (its
  // layers and the embedding), time the costliest rank's.
  const StageCost cost = transformer_stage_cost(m, static_cast<int64_t>(s));
  const double head_flops = cost.last;  // per token
  const std::vector<int> cut = cut_layers_by_cost(static_cast<int>(m.layers), static_cast<int>(l.pp * l.chunks), cost);
  const RankShare first_rank = rank_share(cut, static_cast<int>(l.pp), 0);
  RankShare slowest = first_rank;
  for (int st = 1; st < l.pp; ++st) {
    const RankShare s = rank_share(cut, static_cast<int>(l.pp), st);
    if (s.layers * cost.layer + (s.last ? cost.last : 0.0) >
        slowest.layers * cost.layer + (slowest.last ? cost.last : 0.0))
      slowest = s;
  }
  const double stage_layers = static_cast<double>(first_rank.layers);
  const double slow_layers = static_cast<double>(slowest.layers);
  PlanRow row;
  row.layout = l;

  // Memory: the first stage (its layers and the embedding; the last stage's
  // head is the same size for Llama and tied for GPT).
  const double emb = static_cast<double>(m.embedding_params());
  const double layer_params = (static_cast<double>(m.params()) - emb) / L;
  const double psi = (layer_params * stage_layers + (l.pp == 1 ? emb : emb / (m.llama ? 2 : 1))) / t;
  StateBytes bytes = kMeshtrainBf16;
  bytes.k = r.optimizer_state_bytes;
  const double dp = static_cast<double>(l.dp);
  const int stage = l.zero_stage;
  row.memory.params = stage == 3 ? bytes.p * psi / dp : bytes.p * psi;
  row.memory.grads = stage >= 2 ? bytes.g * psi / dp : bytes.g * psi;
  row.memory.optimizer = stage >= 1 ? bytes.k * psi / dp : bytes.k * psi;
  const double own_psi = stage >= 1 ? psi / dp : psi;
  if (r.offload_gbps > 0) {
    // The moments move out; the f32 master and the staging window stay.
    row.memory.offloaded = (bytes.k - 4) * own_psi;
    row.memory.optimizer = 4 * own_psi + kOffloadStagingBytes;
  }
  const double v = static_cast<double>(l.chunks), ppd = static_cast<double>(l.pp);
  const double in_flight = static_cast<double>(std::min(l.pp, l.micro_batches)) *
                           (l.chunks > 1 ? 1.0 + (ppd - 1) / (ppd * v) : 1.0);
  row.memory.activations =
      activation_bytes_per_layer(s, b, h, static_cast<double>(m.heads), l.tp, l.sequence_parallel,
                                 l.recompute) * stage_layers * in_flight +
      4.0 * s * b * static_cast<double>(m.vocab) / t;  // f32 logits (last stage; one micro-batch)
  if (l.dp > 1) row.memory.comm = 2 * kGradientBucketBytes;
  if (stage == 3) row.memory.comm += 2 * bytes.p * layer_params / t;  // two gathered layers

  // Time, per GPU of the slowest pipeline rank (its layers, and the head when it holds the last stage).
  const double gpus = static_cast<double>(r.gpus);
  const double tokens = static_cast<double>(r.global_batch) * s;
  const double replica_tokens = tokens / dp;  // through one pipeline per step
  // A calibrated CPU's ranks share its caches and memory: all of them busy,
  // each runs slower than alone (1 for catalogue GPUs).
  const double shared = l.dp * l.tp * l.pp > 1 ? c.concurrent_slowdown : 1.0;
  const double peak = (r.fp32 ? (c.fp32_tflops > 0 ? c.fp32_tflops : c.bf16_tflops / 2) : c.bf16_tflops) * 1e12;
  const double rate = peak / shared;  // what the GEMMs get (MFU stays against the peak)
  const double hbm = c.memory_gbps * 1e9 / shared;
  const double value_bytes = r.fp32 ? 4.0 : 2.0;  // an activation's
  const double mb = static_cast<double>(l.micro_batches);
  const double attention_flops = 6.0 * h * s;                        // per layer and token, causal
  const double layer_linear_flops = (m.flops_per_token(static_cast<int64_t>(s)) - head_flops) / L -
                                    attention_flops;
  const double square = r.engine.causal_attention_skips_masked ? 1.0 : 2.0;
  const double head_dim = h / static_cast<double>(m.heads);
  const double linear_s = replica_tokens / t * (slow_layers * layer_linear_flops + (slowest.last ? head_flops : 0.0)) /
                          (rate * gemm_efficiency(c, std::min(h / t, b * s)));
  const double attention_s = replica_tokens / t * slow_layers * attention_flops * square /
                             (rate * gemm_efficiency(c, head_dim));
  const double a = static_cast<double>(m.heads);
  const double stored = activation_bytes_per_layer(s, b, h, a, l.tp, l.sequence_parallel, RecomputePolicy::None);
  const double scores = stored - activation_bytes_per_layer(s, b, h, a, l.tp, l.sequence_parallel,
                                                            RecomputePolicy::Selective);
  // Per micro-batch and stored byte of the stage; the formulas count 16-bit values.
  const double traffic = r.fp32 && c.activation_traffic_fp32 > 0 ? c.activation_traffic_fp32 : c.activation_traffic;
  const double traffic_s = mb * traffic / hbm;
  const double stage_stored = r.stored_activation_bytes > 0
                                  ? r.stored_activation_bytes
                                  : stored * slow_layers * value_bytes / 2;
  const double stage_scores = scores * slow_layers * value_bytes / 2;
  row.time.compute = linear_s + attention_s + traffic_s * stage_stored;
  // A recomputed forward is a third of forward + backward.
  if (l.recompute == RecomputePolicy::Full)
    row.time.recompute = c.recompute_forward_fraction * row.time.compute / 3.0;
  if (l.recompute == RecomputePolicy::Selective)
    row.time.recompute = (attention_s + traffic_s * stage_scores) / 3.0;
  const double act_bytes = b * s * h * value_bytes;  // one micro-batch's activations
  const int tp_collectives = l.recompute == RecomputePolicy::Full ? 6 : 4;
  row.time.tp_comm = slow_layers * mb * tp_collectives *
                     ring_s(act_bytes, l.tp, c.intra_gbps, c.intra_alpha_us, 2.0, c.link_efficiency);
  // The bubble idles the stage's whole op time, its tp collectives included.
  row.time.bubble = (row.time.compute + row.time.recompute + row.time.tp_comm) * (ppd - 1) / (mb * v);
  const bool pp_inside = l.tp * l.pp <= c.gpus_per_node;
  if (l.pp > 1)
    row.time.pp_comm = 2.0 * v * (mb + ppd - 2) *
                       (act_bytes / t / (c.link_efficiency * (pp_inside ? c.intra_gbps : c.inter_gbps) * 1e9) +
                        (pp_inside ? c.intra_alpha_us : c.inter_alpha_us) * 1e-6);
  // The update: AdamW reads the f32 master, m, v and gradient and writes
  // back the first three and the 16-bit copy (30 bytes; 28 in f32) per
  // local parameter.
  row.time.optimizer = (r.fp32 ? 28.0 : 30.0) * (stage >= 1 ? psi / dp : psi) / hbm;
  // Offloaded: each step reads and writes the moments; the update of one
  // unit hides the transfer of the next, so the slower of the two.
  if (r.offload_gbps > 0)
    row.time.optimizer = std::max(row.time.optimizer, 2 * row.memory.offloaded / (r.offload_gbps * 1e9));

  // Data parallelism, as the engine runs it: stages 0-1 reduce the
  // accumulated gradients during the last micro-batch's backward (an
  // allreduce); stages 2-3 reduce-scatter every micro-batch's during its
  // backward; stages 1-2 gather the updated 16-bit parameters from their
  // owners during the next step's first forward; stage 3 gathers each layer
  // before its forward and its backward, every micro-batch.
  const bool dp_inside = l.dp * l.tp * l.pp <= c.gpus_per_node;
  const double dp_gbps = dp_inside ? c.intra_gbps : c.inter_gbps;
  const double dp_alpha = dp_inside ? c.intra_alpha_us : c.inter_alpha_us;
  const double grad_bytes = r.engine.gradient_wire_bytes * psi;
  const double reduce_once = ring_s(grad_bytes, l.dp, dp_gbps, dp_alpha, stage >= 2 ? 1.0 : 2.0, c.link_efficiency);
  const double reduce_s = stage >= 2 ? mb * reduce_once : reduce_once;
  const double gather_once = stage == 0 ? 0.0 : ring_s(bytes.p * psi, l.dp, dp_gbps, dp_alpha, 1.0, c.link_efficiency);
  const double gather_s = stage == 3 ? 2.0 * mb * gather_once : gather_once;
  row.time.dp_reduce = reduce_s;
  row.time.dp_gather = gather_s;
  row.time.dp_total = reduce_s + gather_s;
  const double forward = row.time.compute / 3.0;
  const double backward = 2.0 * row.time.compute / 3.0 + row.time.recompute;
  const double last_bucket = ring_s(std::min(kGradientBucketBytes, grad_bytes), l.dp, dp_gbps, dp_alpha,
                                    stage >= 2 ? 1.0 : 2.0, c.link_efficiency);
  if (l.dp == 1)
    row.time.dp_exposed = 0;
  else if (!r.engine.overlap_dp_with_backward)
    row.time.dp_exposed = row.time.dp_total;
  else if (stage == 3)
    row.time.dp_exposed = std::max(last_bucket, gather_s + reduce_s - forward - backward);
  else if (stage == 2)
    row.time.dp_exposed = std::max(last_bucket, reduce_s - backward) + std::max(0.0, gather_s - forward / mb);
  else
    row.time.dp_exposed = std::max(last_bucket, reduce_s - backward / mb) + std::max(0.0, gather_s - forward / mb);

  const double step = row.time.step();
  const double model_flops = m.flops_per_token(static_cast<int64_t>(s)) * tokens / gpus;
  const double extra_flops = m.recompute_flops_per_token(static_cast<int64_t>(s), l.recompute) * tokens / gpus;
  row.tokens_per_s = tokens / step;
  row.mfu = model_flops / step / peak;
  row.hfu = (model_flops + extra_flops) / step / peak;
  if (c.price_per_gpu_hour > 0)
    row.cost_per_million_tokens = c.price_per_gpu_hour * gpus / 3600.0 / row.tokens_per_s * 1e6;
  if (r.train_tokens > 0) row.days_to_train = r.train_tokens / row.tokens_per_s / 86400.0;
  return row;
}

PlanResult make_plan(const PlanRequest& r) {
  r.model.validate();
  MT_CHECK(r.gpus >= 1, "--gpus must be >= 1 (got {})", r.gpus);
  MT_CHECK(r.global_batch >= 1, "--global-batch must be >= 1 (got {})", r.global_batch);
  const TransformerShape& m = r.model;
  PlanResult out;
  const double limit = r.cluster.memory_gb * 1e9 * r.cluster.usable_fraction;
  bool have_smallest = false;
  for (int64_t tp : divisors(std::min<int64_t>(r.gpus, r.cluster.gpus_per_node))) {
    // The engine's tensor-parallel checks (ModelShard::check_tp_divides).
    if (m.heads % tp || m.kv_heads % tp || m.ffn % tp) continue;
    for (int64_t pp : divisors(m.layers)) {
      if (r.gpus % (tp * pp)) continue;
      const int64_t dp = r.gpus / (tp * pp);
      if (r.global_batch % dp) continue;
      const int64_t per_replica = r.global_batch / dp;
      const std::vector<int64_t> micro_batch_sizes =
          r.fixed.micro_batch > 0 ? std::vector<int64_t>{r.fixed.micro_batch}
                                  : std::vector<int64_t>{1, 2, 4, 8, 16, 32};
      for (int64_t mb : micro_batch_sizes) {
        if (per_replica % mb) continue;
        const int64_t micro = per_replica / mb;
        if (pp > 1 && micro < pp) continue;  // 1F1B needs at least pp micro-batches
        const std::vector<int64_t> chunk_counts =
            r.fixed.chunks > 0 ? std::vector<int64_t>{r.fixed.chunks} : std::vector<int64_t>{1, 2, 4, 8};
        for (int64_t chunks : chunk_counts) {
          // Interleaving: pp > 1, each GPU's layers split evenly into chunks,
          // and micro-batches in whole rounds of pp.
          if (chunks > 1 && (pp == 1 || (m.layers / pp) % chunks || micro % pp)) continue;
        for (int zero = 0; zero <= (dp > 1 ? 3 : 0); ++zero)
          for (RecomputePolicy rc : {RecomputePolicy::None, RecomputePolicy::Selective,
                                     RecomputePolicy::Full})
            for (bool sp : {false, true}) {
              if (sp && tp == 1) continue;
              Layout l{dp, tp, pp, mb, micro, zero, rc, sp, chunks};
              if (!r.fixed.admits(l)) continue;
              PlanRow row = evaluate_layout(r, l);
              ++out.considered;
              if (!have_smallest || row.memory.total() < out.smallest.memory.total()) {
                out.smallest = row;
                have_smallest = true;
              }
              if (row.memory.total() <= limit) out.rows.push_back(std::move(row));
            }
        }
      }
    }
  }
  MT_CHECK(out.considered > 0, "no layout splits {} GPUs and a global batch of {} sequences for {} "
           "(tp must divide the heads, kv heads and ffn width and fit a node of {}; pp the {} "
           "layers; dp the batch){}", r.gpus, r.global_batch, m.name, r.cluster.gpus_per_node,
           m.layers, r.fixed.describe().empty() ? "" : " with " + r.fixed.describe() + " fixed");
  // Fastest first; among equally fast layouts (within 0.1%) the one moving
  // less data (hidden communication rests on the model's least certain
  // assumption, its overlap), then the one needing less memory, then one the
  // engine runs today.
  // Speed in 0.1% buckets (a transitive order, unlike "within 0.1%").
  auto speed_bucket = [](const PlanRow& r) {
    return static_cast<int64_t>(std::floor(std::log(r.tokens_per_s) / std::log(1.001)));
  };
  std::sort(out.rows.begin(), out.rows.end(), [&](const PlanRow& a, const PlanRow& b) {
    const int64_t sa = speed_bucket(a), sb = speed_bucket(b);
    if (sa != sb) return sa > sb;
    const double ca = a.time.dp_total + a.time.tp_comm + a.time.pp_comm;
    const double cb = b.time.dp_total + b.time.tp_comm + b.time.pp_comm;
    if (ca != cb) return ca < cb;
    return a.memory.total() < b.memory.total();
  });
  return out;
}

std::string explain(const PlanRow& a, const PlanRow& b) {
  const TimeBreakdown& x = a.time;
  const TimeBreakdown& y = b.time;
  const std::array<std::pair<const char*, double>, 7> diffs = {{
      {"compute", y.compute - x.compute}, {"recompute", y.recompute - x.recompute},
      {"pipeline bubble", y.bubble - x.bubble}, {"tp communication", y.tp_comm - x.tp_comm},
      {"pipeline sends", y.pp_comm - x.pp_comm}, {"exposed dp communication", y.dp_exposed - x.dp_exposed},
      {"optimizer update", y.optimizer - x.optimizer}}};
  std::string out = fmt::format("{:.3f} s vs {:.3f} s per step:", x.step(), y.step());
  // A real difference (the ranking's 0.1%) is explained by the terms that
  // make it, the smallest listed down to a tenth of the gap.
  const bool faster = y.step() - x.step() > 1e-3 * y.step();
  bool any = false;
  for (const auto& [name, d] : diffs)
    if (faster && std::fabs(d) > 0.1 * (y.step() - x.step())) {
      out += fmt::format(" {} {:+.3f} s;", name, -d);
      any = true;
    }
  const double ca = x.dp_total + x.tp_comm + x.pp_comm, cb = y.dp_total + y.tp_comm + y.pp_comm;
  if (!any && std::fabs(ca - cb) > 1e-3 * std::max(ca, cb))
    out += fmt::format(" the same predicted time; #1 communicates {:.3f} s per step where #2 needs "
                       "{:.3f} s (less rests on overlap)", ca, cb);
  else if (!any)
    out += fmt::format(" the same predicted time; #1 needs {:.1f} GB per GPU where #2 needs {:.1f} "
                       "(more headroom)", a.memory.total() / 1e9, b.memory.total() / 1e9);
  return out;
}

}  // namespace meshtrain::plan
