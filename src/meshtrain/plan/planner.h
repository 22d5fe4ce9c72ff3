// `meshtrain plan`: the layouts (dp x tp x pp, micro-batch, ZeRO stage,
// recompute, sequence parallelism) that fit a model on a cluster, ranked by
// predicted tokens/s, each with a memory and a time breakdown per GPU.
//
// Memory: model states by the ZeRO formulas with meshtrain's bytes
// (memory_formulas.h) for the largest pipeline stage (its layers and the
// embedding), activations by Korthikanti et al.'s per-layer formulas times
// the micro-batches a 1F1B first stage holds (interleaved: times
// 1 + (pp - 1) / (pp x chunks)), the f32 logits, and the
// communication buffers (two gradient buckets; ZeRO-3's two gathered layers).
//
// Time (alpha-beta, docs/PLANNER.md): compute = hardware FLOPs per GPU /
// (peak x efficiency), the efficiency one saturating function of the GEMM
// size; the pipeline's (m + pp - 1) / m; tp's collectives (4 per layer and
// micro-batch, 6 with full recompute) on NVLink, not overlapped; pipeline
// sends (times the chunks when interleaved, whose bubble is divided by them); the data-parallel reduction (and ZeRO-3's gathers) overlapped with
// backward, all but the last bucket.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "meshtrain/plan/cluster.h"
#include "meshtrain/plan/memory_formulas.h"
#include "meshtrain/plan/transformer_shape.h"

namespace meshtrain::plan {

// The engine's default data-parallel gradient bucket (train.bucket_mb).
inline constexpr double kGradientBucketBytes = 25.0 * (1 << 20);
// Offloaded optimizer state's resident window: offload.prefetch + 1 = 3
// buffers of offload.unit_mb = 32 MB (optim/offloaded_optimizer.h).
inline constexpr double kOffloadStagingBytes = 3 * 32e6;

struct Layout;

// The parts of a layout the caller fixes (`meshtrain plan --tp 8 --pp 8`,
// a published run's configuration, a training config); the planner chooses
// the rest. 0, -1 or empty: free.
struct LayoutFilter {
  int64_t dp = 0, tp = 0, pp = 0, micro_batch = 0, chunks = 0;
  int zero_stage = -1;
  std::optional<RecomputePolicy> recompute;
  std::optional<bool> sequence_parallel;
  bool admits(const Layout& l) const;
  std::string describe() const;  // "tp 8, pp 8"; empty when nothing is fixed
};

// What the training software being planned does; the step-time model's
// overlap and kernel rules follow it. meshtrain's by default; the published
// runs the planner is validated against (Megatron-LM 2021-22) differ in
// three documented ways.
struct EngineTraits {
  std::string name = "meshtrain";
  // The data-parallel reduction runs during backward, bucket by bucket
  // (meshtrain; Megatron-LM only since --overlap-grad-reduce, 2023).
  bool overlap_dp_with_backward = true;
  // Causal attention computes only the unmasked half of the scores
  // (meshtrain's kernels, flash attention) rather than the whole s x s
  // square then masked (Megatron-LM 2021-22's fused softmax).
  bool causal_attention_skips_masked = true;
  // Bytes per gradient on the data-parallel wire: meshtrain reduces f32
  // (comm.grad_dtype's default); Megatron-LM 2021 reduced fp16 gradients.
  double gradient_wire_bytes = 4;
  static EngineTraits megatron_2021();
};

struct PlanRequest {
  TransformerShape model;
  ClusterSpec cluster;
  int64_t gpus = 0;
  int64_t global_batch = 0;  // sequences per step
  int64_t seq = 0;           // 0: the model's context
  double train_tokens = 0;   // for time and cost to train; 0: not reported
  LayoutFilter fixed;        // what the caller fixed
  // The GEMMs run in f32 (a CPU run in fp32 or fp16): the f32 peak, and
  // 4-byte activations.
  bool fp32 = false;
  // The engine's exact stored activations of one micro-batch on one rank
  // without recompute (ModelSpec::memory), for a run's own prediction; 0:
  // Korthikanti et al.'s formulas.
  double stored_activation_bytes = 0;
  EngineTraits engine;       // whose overlap and kernel rules
  // Optimizer state bytes per parameter, the f32 master included (k of
  // memory_formulas.h): AdamW and LAMB 12 (master, two moments), SGD with
  // momentum and LARS 8, plain SGD 4 (optimizer_state_bytes()).
  double optimizer_state_bytes = 12;
  // > 0: the optimizer's moments (all of k but the 4-byte master) live in a
  // second tier read and written at this rate per GPU (GB/s, each way
  // shared): not resident, and the update takes at least the time to read
  // and write them (offload.optimizer_state; optim/offloaded_optimizer.h).
  double offload_gbps = 0;
};

// k for an optimizer of meshtrain's (train.optimizer): the f32 master and
// its f32 states; throws for an unknown name.
double optimizer_state_bytes(const std::string& optimizer, bool momentum = true);

struct Layout {
  int64_t dp = 1, tp = 1, pp = 1, micro_batch = 1;
  int64_t micro_batches = 1;  // per pipeline per step (accumulation)
  int zero_stage = 0;
  RecomputePolicy recompute = RecomputePolicy::None;
  bool sequence_parallel = false;
  // Interleaved 1F1B (Narayanan et al. 2021): each GPU holds `chunks`
  // non-adjacent groups of layers; the bubble shrinks by that factor and the
  // pipeline sends grow by it. 1 = plain 1F1B.
  int64_t chunks = 1;
  std::string describe() const;
};

struct MemoryBreakdown {  // bytes per GPU (the largest stage)
  double params = 0, grads = 0, optimizer = 0, activations = 0, comm = 0;
  double offloaded = 0;  // in the second tier (PlanRequest::offload_gbps), not in total()
  double total() const { return params + grads + optimizer + activations + comm; }
};

struct TimeBreakdown {  // seconds per step
  // compute: the step's GEMMs, attention and memory-bound work (norms,
  // activations, softmax, residuals) without recompute; recompute: what the
  // policy re-runs; optimizer: the update's pass over the local states.
  double compute = 0, recompute = 0, bubble = 0, tp_comm = 0, pp_comm = 0, dp_exposed = 0;
  double optimizer = 0;
  double dp_total = 0;  // the whole data-parallel traffic, most of it hidden
  double dp_reduce = 0, dp_gather = 0;  // dp_total's gradient reduction and ZeRO weight gathers
  double step() const {
    return compute + recompute + bubble + tp_comm + pp_comm + dp_exposed + optimizer;
  }
};

struct PlanRow {
  Layout layout;
  MemoryBreakdown memory;
  TimeBreakdown time;
  double tokens_per_s = 0, mfu = 0, hfu = 0;
  double cost_per_million_tokens = 0;  // USD; 0 without a price
  double days_to_train = 0;            // 0 without train_tokens
};

struct PlanResult {
  std::vector<PlanRow> rows;     // fitting layouts, fastest first
  int64_t considered = 0;        // valid layouts examined
  PlanRow smallest;              // the least memory of any valid layout (for the "fits nowhere" error)
};

// Every valid layout, evaluated; those that fit, ranked. Throws a clear
// error for a request that cannot be split at all (gpus, batch).
PlanResult make_plan(const PlanRequest& request);
// Evaluates one layout (no validity check beyond the arithmetic).
PlanRow evaluate_layout(const PlanRequest& request, const Layout& layout);
// Why `a` beats `b`, in one line (the largest differences of the breakdown).
std::string explain(const PlanRow& a, const PlanRow& b);

// The step-time model's four constants, ClusterSpec's gemm_peak_fraction,
// gemm_half_dim, activation_traffic and link_efficiency: defaults the same
// for every catalogue GPU (chosen once against the published runs of
// plan_published_test, which checks them), measured for this machine by
// `meshtrain plan --calibrate`:
//  - a GEMM runs at gemm_peak_fraction n / (n + gemm_half_dim) of the dense
//    peak, n its smallest dimension (hidden / tp or the micro-batch's
//    tokens; attention's head dimension);
//  - memory-bound work (norms, activations, softmax, dropout, residuals)
//    moves activation_traffic times the stored activations (Korthikanti et
//    al.'s bytes, or the engine's exact ones) through memory per forward and
//    backward;
//  - collectives and sends reach link_efficiency of a link's rate.
double gemm_efficiency(const ClusterSpec& c, double n);

}  // namespace meshtrain::plan
