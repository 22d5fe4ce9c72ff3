// `meshtrain plan`: the layouts that fit a model on a cluster, ranked by
// predicted tokens/s, with per-GPU memory and step-time breakdowns
// (src/meshtrain/plan/planner.h; docs/PLANNER.md says what is modeled).
#include <fmt/format.h>

#include <chrono>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "cmd_plan_calibrate.h"
#include "cmd_plan_simulate.h"
#include "commands.h"
#include "meshtrain/core/error.h"
#include "meshtrain/plan/planner.h"

namespace meshtrain::cli {

namespace {

struct PlanOpts {
  std::string model, cluster = "h100-sxm", show_cluster;
  int64_t gpus = 0, global_batch = 0, seq = 0, top = 5;
  double tokens = 0, price = -1;
  bool json = false, explain = false;
  int64_t layers = 0, hidden = 0, heads = 0, kv_heads = 0, ffn = 0, vocab = 0;
  bool llama = false;
  plan::LayoutFilter fixed;
  std::string recompute, sp, precision = "bf16", optimizer = "adamw";
  double offload_gbps = 0;
  bool memory_checkpoints = false;  // --memory-checkpoints: print the copies' host memory
  bool calibrate = false;
  CalibrateOptions calibration;
  SimulateOptions sim;  // --simulate, --trace, --straggler, --mtbf-hours ...
};

plan::LayoutFilter filter_of(const PlanOpts& o) {
  plan::LayoutFilter f = o.fixed;
  if (!o.recompute.empty()) {
    if (o.recompute == "none") f.recompute = plan::RecomputePolicy::None;
    else if (o.recompute == "selective") f.recompute = plan::RecomputePolicy::Selective;
    else if (o.recompute == "full") f.recompute = plan::RecomputePolicy::Full;
    else throw UsageError(fmt::format("--recompute must be none, selective or full (got '{}')", o.recompute));
  }
  if (!o.sp.empty()) {
    if (o.sp != "on" && o.sp != "off")
      throw UsageError(fmt::format("--sp must be on or off (got '{}')", o.sp));
    f.sequence_parallel = o.sp == "on";
  }
  if (f.zero_stage > 3) throw UsageError(fmt::format("--zero must be 0..3 (got {})", f.zero_stage));
  return f;
}

plan::TransformerShape model_of(const PlanOpts& o) {
  if (!o.model.empty()) {
    auto s = plan::shape_preset(o.model);
    if (!s)
      throw UsageError(fmt::format("unknown model '{}' (known: {}; or give --layers --hidden "
                                   "--heads --vocab [--kv-heads --ffn --llama])", o.model,
                                   fmt::join(plan::shape_preset_names(), ", ")));
    return *s;
  }
  if (o.layers <= 0 || o.hidden <= 0 || o.heads <= 0 || o.vocab <= 0)
    throw UsageError("give --model NAME, or --layers, --hidden, --heads and --vocab");
  plan::TransformerShape s;
  s.name = "custom";
  s.llama = o.llama;
  s.layers = o.layers, s.hidden = o.hidden, s.heads = o.heads;
  s.kv_heads = o.kv_heads > 0 ? o.kv_heads : o.heads;
  s.ffn = o.ffn > 0 ? o.ffn : 4 * o.hidden;
  s.vocab = o.vocab;
  s.seq = o.seq > 0 ? o.seq : 2048;
  return s;
}

// checkpoint.memory_every's copies (docs/FAULT_TOLERANCE.md) in a node's host
// memory: each GPU's checkpoint shard (its 1/dp of its stage's tp slice of
// the f32 masters and optimizer state), its own and a buddy's, for the two
// newest steps.
double memory_checkpoint_node_bytes(const plan::PlanRequest& req, const plan::Layout& l) {
  const double local = static_cast<double>(req.model.params()) / static_cast<double>(l.tp * l.pp);
  const double shard = local * req.optimizer_state_bytes / static_cast<double>(l.dp);
  return 2 * 2 * shard * req.cluster.gpus_per_node;
}

nlohmann::json row_json(const plan::PlanRequest& req, const plan::PlanRow& r) {
  const plan::Layout& l = r.layout;
  return {{"dp", l.dp}, {"tp", l.tp}, {"pp", l.pp}, {"micro_batch", l.micro_batch},
          {"micro_batches", l.micro_batches}, {"zero_stage", l.zero_stage},
          {"recompute", plan::recompute_policy_name(l.recompute)},
          {"sequence_parallel", l.sequence_parallel}, {"chunks", l.chunks},
          {"memory_gb", {{"params", r.memory.params / 1e9}, {"grads", r.memory.grads / 1e9},
                         {"optimizer", r.memory.optimizer / 1e9},
                         {"activations", r.memory.activations / 1e9}, {"comm", r.memory.comm / 1e9},
                         {"offloaded", r.memory.offloaded / 1e9}, {"total", r.memory.total() / 1e9}}},
          {"time_s", {{"compute", r.time.compute}, {"recompute", r.time.recompute},
                      {"bubble", r.time.bubble}, {"tp_comm", r.time.tp_comm},
                      {"pp_comm", r.time.pp_comm}, {"dp_exposed", r.time.dp_exposed},
                      {"dp_total", r.time.dp_total}, {"step", r.time.step()}}},
          {"tokens_per_s", r.tokens_per_s}, {"mfu", r.mfu}, {"hfu", r.hfu},
          {"cost_per_million_tokens", r.cost_per_million_tokens}, {"days_to_train", r.days_to_train},
          {"memory_checkpoint_copies_gb_per_node", memory_checkpoint_node_bytes(req, l) / 1e9}};
}

void run_plan(const PlanOpts& o) {
  if (o.calibrate) return run_plan_calibrate(o.calibration);
  if (!o.show_cluster.empty()) {
    fmt::print("{}\n", plan::ClusterSpec::load(o.show_cluster).to_json().dump(2));
    return;
  }
  if (o.gpus < 1) throw UsageError("--gpus N is required (N >= 1)");
  if (o.global_batch < 1) throw UsageError("--global-batch B (sequences per step) is required");
  if (o.top < 1) throw UsageError("--top must be >= 1");
  check_simulate_options(o.sim, o.gpus);
  const auto t0 = std::chrono::steady_clock::now();
  plan::PlanRequest req;
  req.model = model_of(o);
  req.cluster = plan::ClusterSpec::load(o.cluster);
  if (o.price >= 0) req.cluster.price_per_gpu_hour = o.price;
  req.gpus = o.gpus;
  req.global_batch = o.global_batch;
  req.seq = o.seq;
  req.train_tokens = o.tokens;
  req.fixed = filter_of(o);
  if (o.precision != "bf16" && o.precision != "fp32")
    throw UsageError(fmt::format("--precision must be bf16 or fp32 (got '{}')", o.precision));
  req.fp32 = o.precision == "fp32";
  req.optimizer_state_bytes = plan::optimizer_state_bytes(o.optimizer);
  req.offload_gbps = o.offload_gbps;
  const plan::PlanResult res = plan::make_plan(req);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (res.rows.empty()) {
    const plan::MemoryBreakdown& m = res.smallest.memory;
    fail("no layout of {} on {} x {} fits {:.0f} GB per GPU ({:.0f}% usable): the smallest of the "
         "{} valid layouts ({}) needs {:.1f} GB = params {:.1f} + grads {:.1f} + optimizer {:.1f} + "
         "activations {:.1f} + comm {:.1f}; add GPUs, a larger GPU or a smaller global batch",
         req.model.name, o.gpus, req.cluster.name, req.cluster.memory_gb,
         req.cluster.usable_fraction * 100, res.considered, res.smallest.layout.describe(),
         m.total() / 1e9, m.params / 1e9, m.grads / 1e9, m.optimizer / 1e9, m.activations / 1e9,
         m.comm / 1e9);
  }
  const size_t k = std::min<size_t>(static_cast<size_t>(o.top), res.rows.size());
  if (o.json) {
    nlohmann::json j = {{"model", req.model.describe()}, {"cluster", req.cluster.to_json()},
                        {"gpus", o.gpus}, {"global_batch", o.global_batch},
                        {"seq", o.seq > 0 ? o.seq : req.model.seq}, {"considered", res.considered},
                        {"fitting", res.rows.size()}, {"seconds", secs}};
    for (size_t i = 0; i < k; ++i) j["layouts"].push_back(row_json(req, res.rows[i]));
    add_simulate_json(j, req, res.rows[0], o.sim);
    fmt::print("{}\n", j.dump());
    return;
  }
  const int64_t seq = o.seq > 0 ? o.seq : req.model.seq;
  fmt::print("model: {}\n", req.model.describe());
  fmt::print("cluster: {} GPUs of {} ({:.0f} GB, {:.0f} dense bf16 TFLOP/s, {} per node, NVLink "
             "{:g} GB/s, network {:g} GB/s per GPU)\n", o.gpus, req.cluster.name,
             req.cluster.memory_gb, req.cluster.bf16_tflops, req.cluster.gpus_per_node,
             req.cluster.intra_gbps, req.cluster.inter_gbps);
  fmt::print("step: {} sequences x {} tokens; {} valid layouts, {} fit; planned in {:.2f} s\n",
             o.global_batch, seq, res.considered, res.rows.size(), secs);
  for (size_t i = 0; i < k; ++i) {
    const plan::PlanRow& r = res.rows[i];
    const plan::MemoryBreakdown& m = r.memory;
    const plan::TimeBreakdown& t = r.time;
    fmt::print("\n#{} {}\n", i + 1, r.layout.describe());
    fmt::print("   {:.0f} tokens/s, step {:.3f} s, MFU {:.1f}%, HFU {:.1f}%", r.tokens_per_s, t.step(),
               r.mfu * 100, r.hfu * 100);
    if (r.cost_per_million_tokens > 0) fmt::print(", ${:.3f} per million tokens", r.cost_per_million_tokens);
    if (r.days_to_train > 0) fmt::print(", {:.1f} days for {:.3g} tokens", r.days_to_train, o.tokens);
    fmt::print("\n   memory per GPU {:.1f} GB = params {:.1f} + grads {:.1f} + optimizer {:.1f} + "
               "activations {:.1f} + comm {:.1f}{}\n", m.total() / 1e9, m.params / 1e9, m.grads / 1e9,
               m.optimizer / 1e9, m.activations / 1e9, m.comm / 1e9,
               m.offloaded > 0 ? fmt::format("; offloaded {:.1f}", m.offloaded / 1e9) : "");
    fmt::print("   time per step: compute {:.3f} + recompute {:.3f} + bubble {:.3f} + tp {:.3f} + "
               "pp sends {:.3f} + dp exposed {:.3f} (of {:.3f}) s\n", t.compute, t.recompute,
               t.bubble, t.tp_comm, t.pp_comm, t.dp_exposed, t.dp_total);
    if (o.memory_checkpoints) {
      const double node = memory_checkpoint_node_bytes(req, r.layout);
      fmt::print("   in-memory checkpoint copies: {:.1f} GB of host memory per node ({} GPUs x "
                 "{:.2f} GB shards, each kept by its GPU's node and a buddy node, two steps)\n",
                 node / 1e9, req.cluster.gpus_per_node, node / 4 / req.cluster.gpus_per_node / 1e9);
    }
  }
  if (o.explain && res.rows.size() >= 2)
    fmt::print("\nwhy #1 over #2: {}\n", plan::explain(res.rows[0], res.rows[1]));
  print_simulate_sections(req, res.rows[0], o.sim);
  fmt::print("\nmodel: FLOPs convention, efficiency and link figures in docs/PLANNER.md "
             "(checked against published A100 runs: median error 3-5%, worst 8.4%)\n");
}

}  // namespace

void register_plan(CLI::App& app) {
  auto o = std::make_shared<PlanOpts>();
  CLI::App* c = app.add_subcommand(
      "plan", "Rank the layouts (dp x tp x pp, micro-batch, ZeRO, recompute) that fit a model on a "
              "cluster, with memory and step-time breakdowns per GPU");
  c->add_option("--model", o->model, "Model name (gpt2, gpt3-175b, gpt-100b, gpt-1t, llama-3-8b, ...)");
  c->add_option("--cluster", o->cluster, "a100-40gb, a100-80gb, h100-sxm, h200, b200 or a JSON file")
      ->capture_default_str();
  c->add_option("--gpus", o->gpus, "GPUs in the job");
  c->add_option("--global-batch", o->global_batch, "Sequences per optimizer step");
  c->add_option("--seq", o->seq, "Sequence length (default: the model's context)");
  c->add_option("--tokens", o->tokens, "Tokens to train on (prints days to train)");
  c->add_option("--price-per-gpu-hour", o->price, "USD per GPU-hour (default: the cluster's)");
  c->add_option("--top", o->top, "Layouts to print")->capture_default_str();
  c->add_flag("--json", o->json, "One JSON object");
  c->add_flag("--explain", o->explain, "Say why the first layout beats the second");
  c->add_flag("--calibrate", o->calibrate, "Measure this machine (GEMMs, memory, collectives, a "
              "reference step) into a cluster file that train and bench train predict with");
  c->add_option("--ranks", o->calibration.ranks, "--calibrate: ranks the machine is split into")
      ->capture_default_str();
  c->add_option("--threads", o->calibration.threads, "--calibrate: threads per rank (default: cores / ranks)");
  c->add_option("--reference-model", o->calibration.reference, "--calibrate: the preset whose real "
                "steps give the memory-bound and recompute constants (best: the one you will train)")
      ->capture_default_str();
  c->add_option("--reference-batch", o->calibration.batch, "--calibrate: its micro-batch (sequences)")
      ->capture_default_str();
  c->add_option("--out", o->calibration.out, "--calibrate: file to write (default: "
                "$MESHTRAIN_MACHINE_FILE or ~/.cache/meshtrain/machine.json)");
  add_simulate_options(c, o->sim);
  c->add_option("--show-cluster", o->show_cluster, "Print a cluster's figures as JSON and stop");
  c->add_option("--dp", o->fixed.dp, "Fix data parallelism (default: the planner chooses)");
  c->add_option("--tp", o->fixed.tp, "Fix tensor parallelism");
  c->add_option("--pp", o->fixed.pp, "Fix pipeline stages");
  c->add_option("--chunks", o->fixed.chunks, "Fix interleaved chunks per GPU (1: plain 1F1B)");
  c->add_option("--micro-batch", o->fixed.micro_batch, "Fix the micro-batch (sequences)");
  c->add_option("--zero", o->fixed.zero_stage, "Fix the ZeRO stage (0-3)");
  c->add_option("--recompute", o->recompute, "Fix recompute: none, selective or full");
  c->add_option("--sp", o->sp, "Fix sequence parallelism: on or off");
  c->add_option("--optimizer", o->optimizer, "adamw or lamb (12 bytes of state per parameter with "
                 "the f32 master), sgd or lars (8, with momentum)")->capture_default_str();
  c->add_flag("--memory-checkpoints", o->memory_checkpoints, "Print the host memory per node that "
              "in-memory checkpoint copies with buddies take (checkpoint.memory_every)");
  c->add_option("--offload-gbps", o->offload_gbps, "Offload the optimizer's moments to a second "
                 "tier (disk, host memory) with this read/write rate per GPU in GB/s; 0: none")
      ->check(CLI::NonNegativeNumber);
  c->add_option("--precision", o->precision, "bf16 (mixed precision) or fp32 GEMMs and activations")
      ->capture_default_str();
  c->add_option("--layers", o->layers, "Custom model: layers");
  c->add_option("--hidden", o->hidden, "Custom model: hidden width");
  c->add_option("--heads", o->heads, "Custom model: attention heads");
  c->add_option("--kv-heads", o->kv_heads, "Custom model: key/value heads (default: heads)");
  c->add_option("--ffn", o->ffn, "Custom model: MLP width (default: 4 x hidden)");
  c->add_option("--vocab", o->vocab, "Custom model: vocabulary");
  c->add_flag("--llama", o->llama, "Custom model: Llama-style (SwiGLU, untied head)");
  c->callback([o]() { run_plan(*o); });
}

}  // namespace meshtrain::cli
