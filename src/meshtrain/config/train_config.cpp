#include "meshtrain/config/train_config.h"

#include <charconv>
#include <cmath>

#include "meshtrain/core/error.h"

namespace meshtrain {

namespace {

// One writer for both JSON flavours: json (sorted keys, for saving and
// comparing) and ordered_json (the documented order, for people).
template <typename J>
J to_json(const TrainConfig& c) {
  J j;
  J model;
  model["family"] = c.model.family;
  model["preset"] = c.model.preset;
  model["n_layer"] = c.model.n_layer;
  model["n_head"] = c.model.n_head;
  model["n_embd"] = c.model.n_embd;
  model["seq_len"] = c.model.seq_len;
  model["vocab_size"] = c.model.vocab_size;
  model["n_kv_head"] = c.model.n_kv_head;
  model["ffn_hidden"] = c.model.ffn_hidden;
  model["rope_theta"] = c.model.rope_theta;
  model["sync_bn"] = c.model.sync_bn;
  j["model"] = model;
  j["init_from"] = c.init_from;
  j["data"] = J{{"train", c.data.train}, {"val", c.data.val}};
  J train;
  const TrainSection& t = c.train;
  train["micro_batch"] = t.micro_batch;
  train["grad_accum"] = t.grad_accum;
  train["steps"] = t.steps;
  train["lr"] = t.lr;
  train["min_lr_ratio"] = t.min_lr_ratio;
  train["warmup"] = t.warmup;
  train["schedule"] = t.schedule;
  train["optimizer"] = t.optimizer;
  train["weight_decay"] = t.weight_decay;
  train["momentum"] = t.momentum;
  train["nesterov"] = t.nesterov;
  train["trust_coefficient"] = t.trust_coefficient;
  train["trust_clip"] = t.trust_clip;
  train["exclude_norms_and_biases"] = t.exclude_norms_and_biases;
  train["beta1"] = t.beta1;
  train["beta2"] = t.beta2;
  train["eps"] = t.eps;
  train["clip"] = t.clip;
  train["eval_every"] = t.eval_every;
  train["eval_batches"] = t.eval_batches;
  train["seed"] = t.seed;
  train["threads"] = t.threads;
  train["log_every"] = t.log_every;
  train["sample_every"] = t.sample_every;
  train["max_minutes"] = t.max_minutes;
  train["save_every"] = t.save_every;
  train["lr_scaling"] = t.lr_scaling;
  train["lr_base_batch"] = t.lr_base_batch;
  j["train"] = train;
  J parallel;
  if (c.parallel.dp == 0) {
    parallel["dp"] = "auto";
  } else {
    parallel["dp"] = c.parallel.dp;
  }
  parallel["tp"] = c.parallel.tp;
  parallel["pp"] = c.parallel.pp;
  parallel["schedule"] = c.parallel.schedule;
  parallel["chunks"] = c.parallel.chunks;
  parallel["stage_layers"] = c.parallel.stage_layers;
  parallel["bucket_mb"] = c.parallel.bucket_mb;
  parallel["first_bucket_mb"] = c.parallel.first_bucket_mb;
  J local;
  local["sync_every"] = c.parallel.local_sgd.sync_every;
  local["outer_lr"] = c.parallel.local_sgd.outer_lr;
  local["outer_momentum"] = c.parallel.local_sgd.outer_momentum;
  local["nesterov"] = c.parallel.local_sgd.nesterov;
  parallel["local_sgd"] = local;
  parallel["parameter_server"] = J{{"enabled", c.parallel.parameter_server.enabled},
                                   {"staleness", c.parallel.parameter_server.staleness},
                                   {"staleness_lr", c.parallel.parameter_server.staleness_lr}};
  parallel["sequence_parallel"] = c.parallel.sequence_parallel;
  j["parallel"] = parallel;
  j["zero"] = J{{"stage", c.zero.stage}, {"persist_threshold", c.zero.persist_threshold}};
  j["lora"] = J{{"rank", c.lora.rank}, {"alpha", c.lora.alpha}, {"targets", c.lora.targets},
                {"base_dtype", c.lora.base_dtype}};
  j["memory"] = J{{"limit_mb", c.memory.limit_mb}};
  j["offload"] = J{{"optimizer_state", c.offload.optimizer_state}, {"path", c.offload.path},
                   {"unit_mb", c.offload.unit_mb}, {"prefetch", c.offload.prefetch}};
  j["precision"] = c.precision;
  j["device"] = c.device;
  j["loss_scale"] = J{{"initial", c.loss_scale.initial},
                      {"growth_interval", c.loss_scale.growth_interval},
                      {"hysteresis", c.loss_scale.hysteresis},
                      {"min", c.loss_scale.min},
                      {"max_consecutive_skips", c.loss_scale.max_consecutive_skips}};
  j["recompute"] = c.recompute;
  j["deterministic"] = c.deterministic;
  J ckpt;
  ckpt["dir"] = c.checkpoint.dir;
  ckpt["every"] = c.checkpoint.every;
  ckpt["keep_last"] = c.checkpoint.keep_last;
  ckpt["milestone_every"] = c.checkpoint.milestone_every;
  ckpt["async"] = c.checkpoint.async;
  ckpt["memory_every"] = c.checkpoint.memory_every;
  ckpt["memory_dir"] = c.checkpoint.memory_dir;
  ckpt["resume"] = c.checkpoint.resume;
  j["checkpoint"] = ckpt;
  J tel;
  tel["dir"] = c.telemetry.dir;
  tel["trace"] = c.telemetry.trace;
  tel["price_per_device_hour"] = c.telemetry.price_per_device_hour;
  tel["peak_gflops"] = c.telemetry.peak_gflops;
  j["telemetry"] = tel;
  J comm;
  comm["transport"] = c.comm.transport;
  comm["timeout_s"] = c.comm.timeout_s;
  comm["grad_dtype"] = c.comm.grad_dtype;
  J compression;
  compression["type"] = c.comm.compression.type;
  compression["rank"] = c.comm.compression.rank;
  compression["ratio"] = c.comm.compression.ratio;
  compression["warmup_steps"] = c.comm.compression.warmup_steps;
  compression["error_feedback"] = c.comm.compression.error_feedback;
  comm["compression"] = compression;
  j["comm"] = comm;
  j["run_name"] = c.run_name;
  j["out"] = c.out;
  return j;
}

}  // namespace

nlohmann::json resolved_json(const TrainConfig& config) { return to_json<nlohmann::json>(config); }

std::string to_string(const TrainConfig& config) {
  return to_json<nlohmann::ordered_json>(config).dump(2);
}

void resolve_derived_paths(TrainConfig& c) {
  if (c.telemetry.dir.empty()) c.telemetry.dir = "runs/" + c.run_name;
  if (c.checkpoint.dir.empty()) c.checkpoint.dir = c.telemetry.dir + "/ckpt";
  if (c.out.empty()) c.out = c.telemetry.dir + "/model.safetensors";
}

double scaled_lr(const TrainSection& t, int64_t global_batch) {
  if (t.lr_scaling == "none") return t.lr;
  MT_CHECK(t.lr_base_batch >= 1, "train.lr_scaling = \"{}\" needs train.lr_base_batch (the global "
           "batch in sequences at which train.lr was tuned)", t.lr_scaling);
  const double ratio = static_cast<double>(global_batch) / static_cast<double>(t.lr_base_batch);
  if (t.lr_scaling == "linear") return t.lr * ratio;
  if (t.lr_scaling == "sqrt") return t.lr * std::sqrt(ratio);
  fail("train.lr_scaling must be none, linear or sqrt; got \"{}\"", t.lr_scaling);
}

RecomputePolicy parse_recompute(const std::string& value) {
  using Kind = RecomputePolicy::Kind;
  if (value == "none") return {Kind::None, 0};
  if (value == "full") return {Kind::Full, 0};
  if (value == "selective") return {Kind::Selective, 0};
  if (value.rfind("every:", 0) == 0) {
    const std::string k = value.substr(6);
    int every = 0;
    const auto [end, ec] = std::from_chars(k.data(), k.data() + k.size(), every);
    if (ec == std::errc() && end == k.data() + k.size() && every >= 1) return {Kind::EveryK, every};
    fail("recompute 'every:K' needs an integer K >= 1, got \"{}\"", value);
  }
  fail("recompute must be one of none, full, every:K, selective; got \"{}\"", value);
}

}  // namespace meshtrain
