#include "meshtrain/config/config_convert.h"

#include <cmath>
#include <limits>
#include <vector>

#include "meshtrain/config/suggest.h"
#include "meshtrain/core/device.h"
#include "meshtrain/core/error.h"

namespace meshtrain {

namespace {

using nlohmann::json;

// Typed access to dotted keys; every failure names the key, what was expected,
// the value found and where it came from.
class Reader {
 public:
  Reader(const json& root, const std::function<std::string(const std::string&)>& origin)
      : root_(root), origin_(origin) {}

  const json& at(const std::string& path) const {
    const json* j = &root_;
    size_t start = 0;
    while (true) {
      const size_t dot = path.find('.', start);
      j = &j->at(path.substr(start, dot - start));
      if (dot == std::string::npos) return *j;
      start = dot + 1;
    }
  }

  [[noreturn]] void error(const std::string& path, const std::string& what) const {
    const std::string from = origin_ ? origin_(path) : "";
    fail("{} {}{}", path, what, from.empty() ? "" : " (from " + from + ")");
  }

  int64_t integer(const std::string& path, int64_t lo, int64_t hi = INT32_MAX) const {
    const json& j = at(path);
    int64_t v = 0;
    if (j.is_number_unsigned()) {
      const uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) error(path, fmt::format("must be <= {}, got {}", hi, u));
      v = static_cast<int64_t>(u);
    } else if (j.is_number_integer()) {
      v = j.get<int64_t>();
    } else if (j.is_number_float() && std::isfinite(j.get<double>()) &&
               j.get<double>() == std::trunc(j.get<double>()) && std::abs(j.get<double>()) < 9e15) {
      v = static_cast<int64_t>(j.get<double>());  // 1e3 is a fine way to write 1000
    } else {
      error(path, "must be an integer, got " + j.dump());
    }
    if (v < lo) error(path, fmt::format("must be >= {}, got {}", lo, v));
    if (v > hi) error(path, fmt::format("must be <= {}, got {}", hi, v));
    return v;
  }

  int small_int(const std::string& path, int lo, int hi = INT32_MAX) const {
    return static_cast<int>(integer(path, lo, hi));
  }

  double number(const std::string& path) const {
    const json& j = at(path);
    if (!j.is_number()) error(path, "must be a number, got " + j.dump());
    return j.get<double>();
  }

  bool boolean(const std::string& path) const {
    const json& j = at(path);
    if (!j.is_boolean()) error(path, "must be true or false, got " + j.dump());
    return j.get<bool>();
  }

  // Strings; null reads as "" (unset).
  std::string string(const std::string& path) const {
    const json& j = at(path);
    if (j.is_null()) return "";
    if (!j.is_string()) error(path, "must be a string, got " + j.dump());
    return j.get<std::string>();
  }

  std::string choice(const std::string& path, const std::vector<std::string>& allowed) const {
    const std::string v = string(path);
    for (const auto& a : allowed)
      if (v == a) return v;
    error(path, fmt::format("must be one of {}; got \"{}\"{}", fmt::join(allowed, ", "), v,
                            did_you_mean(v, allowed)));
  }

  double positive(const std::string& path) const {
    const double v = number(path);
    if (!(v > 0)) error(path, fmt::format("must be > 0, got {}", v));
    return v;
  }

  double in_range(const std::string& path, double lo, double hi, bool hi_open) const {
    const double v = number(path);
    if (!(v >= lo && (hi_open ? v < hi : v <= hi)))
      error(path, fmt::format("must be in [{}, {}{}, got {}", lo, hi, hi_open ? ")" : "]", v));
    return v;
  }

 private:
  const json& root_;
  const std::function<std::string(const std::string&)>& origin_;
};

// The parameter server's workers take different numbers of steps with no
// collective between them: whatever needs every rank at the same step (or
// shards the model another way) is refused, each with its reason.
void check_parameter_server(const TrainConfig& c, const Reader& r) {
  const char* key = "parallel.parameter_server.enabled";
  auto refuse = [&](const std::string& what, const std::string& why) {
    r.error(key, fmt::format("= true with {}: {}", what, why));
  };
  if (c.parallel.tp > 1 || c.parallel.pp > 1)
    refuse(fmt::format("parallel.tp = {} / parallel.pp = {}", c.parallel.tp, c.parallel.pp),
           "its workers are whole replicas (data parallelism only); set both to 1");
  if (c.zero.stage > 0)
    refuse(fmt::format("zero.stage = {}", c.zero.stage),
           "the server already shards the parameters and optimizer state; use zero.stage = 0");
  if (c.parallel.local_sgd.sync_every > 0)
    refuse("parallel.local_sgd.sync_every > 0", "choose one of local SGD and the parameter server");
  if (c.comm.compression.type != "none")
    refuse(fmt::format("comm.compression.type = \"{}\"", c.comm.compression.type),
           "workers push whole f32 gradients into shared memory; there is no wire to compress");
  if (c.comm.transport != "auto" && c.comm.transport != "shm")
    refuse(fmt::format("comm.transport = \"{}\"", c.comm.transport),
           "the shards live in one host's shared memory; use \"shm\" (or \"auto\") on one host");
  if (c.checkpoint.every > 0 || c.checkpoint.memory_every > 0)
    refuse("checkpoint.every / checkpoint.memory_every > 0",
           "a checkpoint needs every rank at the same step, and the workers are not; set both to 0");
  if (c.checkpoint.resume != "auto" && c.checkpoint.resume != "never")
    refuse(fmt::format("checkpoint.resume = \"{}\"", c.checkpoint.resume),
           "it starts from init_from or the seed (its runs write no checkpoint to resume)");
  if (c.train.max_minutes > 0)
    refuse("train.max_minutes > 0", "the time budget is decided collectively at a step; set train.steps");
  if (c.train.save_every > 0 || c.train.sample_every > 0)
    refuse("train.save_every / train.sample_every > 0",
           "the model is assembled from the shards once, when every worker has finished");
}

void check_model(const TrainConfig& c, const Reader& r) {
  const ModelSection& m = c.model;
  if (m.preset.empty() && c.init_from.empty()) {
    std::vector<std::string> missing;
    if (m.n_layer == 0) missing.push_back("n_layer");
    if (m.n_head == 0) missing.push_back("n_head");
    if (m.n_embd == 0) missing.push_back("n_embd");
    if (m.seq_len == 0) missing.push_back("seq_len");
    if (m.vocab_size == 0) missing.push_back("vocab_size");
    if (!missing.empty())
      r.error("model", fmt::format("needs a preset, an init_from, or every dimension; "
                                   "missing model.{}", fmt::join(missing, ", model.")));
  }
  if (m.n_head > 0 && m.n_embd > 0 && m.n_embd % m.n_head != 0)
    r.error("model.n_embd", fmt::format("({}) must be divisible by model.n_head ({})", m.n_embd,
                                        m.n_head));
}

}  // namespace

TrainConfig convert_config(const nlohmann::json& j,
                           const std::function<std::string(const std::string&)>& origin) {
  const Reader r(j, origin);
  TrainConfig c;
  c.model.family = r.string("model.family");
  if (!c.model.family.empty()) c.model.family = r.choice("model.family", {"gpt", "llama", "resnet"});
  c.model.preset = r.string("model.preset");
  c.model.n_layer = r.small_int("model.n_layer", 0);
  c.model.n_head = r.small_int("model.n_head", 0);
  c.model.n_embd = r.small_int("model.n_embd", 0);
  c.model.seq_len = r.small_int("model.seq_len", 0);
  c.model.vocab_size = r.small_int("model.vocab_size", 0);
  c.model.n_kv_head = r.small_int("model.n_kv_head", 0);
  c.model.ffn_hidden = r.small_int("model.ffn_hidden", 0);
  c.model.rope_theta = r.number("model.rope_theta");
  if (c.model.rope_theta < 0) r.error("model.rope_theta", "must be >= 0 (0 = the preset's)");
  c.model.sync_bn = r.boolean("model.sync_bn");
  c.init_from = r.string("init_from");
  c.data.train = r.string("data.train");
  c.data.val = r.string("data.val");

  TrainSection& t = c.train;
  t.micro_batch = r.small_int("train.micro_batch", 1);
  t.grad_accum = r.small_int("train.grad_accum", 1);
  t.steps = r.integer("train.steps", 0, INT64_MAX);
  t.lr = r.positive("train.lr");
  t.min_lr_ratio = r.in_range("train.min_lr_ratio", 0.0, 1.0, false);
  t.warmup = r.integer("train.warmup", 0, INT64_MAX);
  t.schedule = r.choice("train.schedule", {"cosine", "linear", "constant"});
  t.optimizer = r.choice("train.optimizer", {"adamw", "sgd", "lars", "lamb"});
  t.weight_decay = r.in_range("train.weight_decay", 0.0, 1e9, false);
  t.momentum = r.in_range("train.momentum", 0.0, 1.0, true);
  t.nesterov = r.boolean("train.nesterov");
  if (t.nesterov && t.momentum == 0)
    r.error("train.nesterov", "needs train.momentum > 0 (Nesterov momentum with no momentum)");
  t.trust_coefficient = r.positive("train.trust_coefficient");
  t.trust_clip = r.in_range("train.trust_clip", 0.0, 1e9, false);
  t.exclude_norms_and_biases = r.boolean("train.exclude_norms_and_biases");
  t.beta1 = r.in_range("train.beta1", 0.0, 1.0, true);
  t.beta2 = r.in_range("train.beta2", 0.0, 1.0, true);
  t.eps = r.positive("train.eps");
  t.clip = r.in_range("train.clip", 0.0, std::numeric_limits<double>::max(), false);
  t.eval_every = r.integer("train.eval_every", 0, INT64_MAX);
  t.eval_batches = r.small_int("train.eval_batches", 1);
  t.seed = static_cast<uint64_t>(r.integer("train.seed", 0, INT64_MAX));
  t.threads = r.small_int("train.threads", 0, 4096);
  t.log_every = r.integer("train.log_every", 1, INT64_MAX);
  t.sample_every = r.integer("train.sample_every", 0, INT64_MAX);
  t.max_minutes = r.in_range("train.max_minutes", 0.0, 1e7, false);
  t.save_every = r.integer("train.save_every", 0, INT64_MAX);
  t.lr_scaling = r.choice("train.lr_scaling", {"none", "linear", "sqrt"});
  t.lr_base_batch = r.integer("train.lr_base_batch", 0, INT64_MAX);
  if (t.lr_scaling != "none" && t.lr_base_batch == 0)
    r.error("train.lr_base_batch", fmt::format("must be >= 1 when train.lr_scaling is \"{}\" (the "
                                               "global batch in sequences train.lr was tuned at)",
                                               t.lr_scaling));

  // parallel.dp: "auto", a positive integer, or its decimal string (from --set).
  const json& dp = r.at("parallel.dp");
  if (dp.is_string() && dp.get<std::string>() == "auto") {
    c.parallel.dp = 0;
  } else if (dp.is_string()) {
    const std::string s = dp.get<std::string>();
    if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string::npos ||
        std::stoi(s) < 1)
      r.error("parallel.dp", "must be \"auto\" or an integer >= 1, got " + dp.dump());
    c.parallel.dp = std::stoi(s);
  } else if (dp.is_number()) {
    c.parallel.dp = r.small_int("parallel.dp", 1);
  } else {
    r.error("parallel.dp", "must be \"auto\" or an integer >= 1, got " + dp.dump());
  }
  c.parallel.tp = r.small_int("parallel.tp", 1);
  c.parallel.pp = r.small_int("parallel.pp", 1);
  c.parallel.schedule = r.choice("parallel.schedule", {"gpipe", "1f1b", "interleaved", "zb-h1"});
  c.parallel.chunks = r.small_int("parallel.chunks", 1);
  c.parallel.stage_layers = r.string("parallel.stage_layers");
  if (c.parallel.schedule == "interleaved" && c.parallel.chunks < 2)
    r.error("parallel.chunks", fmt::format("must be 2 or more under the interleaved schedule (model "
                                           "chunks per pipeline rank), got {}; set parallel.chunks = "
                                           "2, or parallel.schedule = \"1f1b\"", c.parallel.chunks));
  if (c.parallel.schedule == "interleaved" && c.train.grad_accum % std::max(1, c.parallel.pp) != 0)
    r.error("train.grad_accum", fmt::format("must be a multiple of parallel.pp = {} under the "
                                            "interleaved schedule (micro-batches go in rounds of the "
                                            "stages), got {}", c.parallel.pp, c.train.grad_accum));
  if (c.parallel.schedule == "zb-h1" && c.parallel.chunks > 1)
    r.error("parallel.chunks", fmt::format("= {} under zb-h1, which runs one chunk per pipeline rank; "
                                           "set parallel.chunks = 1", c.parallel.chunks));
  if (c.parallel.schedule == "1f1b" && c.parallel.chunks > 1)
    r.error("parallel.chunks", fmt::format("= {} under 1F1B is the interleaved schedule; set "
                                           "parallel.schedule = \"interleaved\"", c.parallel.chunks));
  c.parallel.bucket_mb = r.in_range("parallel.bucket_mb", 1e-6, 1e6, false);
  c.parallel.first_bucket_mb = r.in_range("parallel.first_bucket_mb", 1e-6, 1e6, false);
  c.parallel.local_sgd.sync_every = r.integer("parallel.local_sgd.sync_every", 0, INT64_MAX);
  c.parallel.local_sgd.outer_lr = r.positive("parallel.local_sgd.outer_lr");
  c.parallel.local_sgd.outer_momentum = r.in_range("parallel.local_sgd.outer_momentum", 0.0, 1.0, true);
  c.parallel.local_sgd.nesterov = r.boolean("parallel.local_sgd.nesterov");
  c.parallel.parameter_server.enabled = r.boolean("parallel.parameter_server.enabled");
  c.parallel.parameter_server.staleness = r.integer("parallel.parameter_server.staleness", 0, 1000000);
  c.parallel.parameter_server.staleness_lr = r.boolean("parallel.parameter_server.staleness_lr");
  c.parallel.sequence_parallel = r.boolean("parallel.sequence_parallel");
  c.zero.stage = r.small_int("zero.stage", 0, 3);
  c.zero.persist_threshold = r.integer("zero.persist_threshold", 0, INT64_MAX);
  c.lora.rank = r.small_int("lora.rank", 0, 4096);
  c.lora.alpha = r.positive("lora.alpha");
  c.lora.targets = r.string("lora.targets");
  if (c.lora.targets.empty()) r.error("lora.targets", "must be \"all\" or names such as \"q_proj,v_proj\"");
  if (c.lora.rank > 0 && c.parallel.tp > 1)
    r.error("lora.rank", fmt::format("LoRA with tensor parallelism (parallel.tp = {}) is not "
                                     "supported yet; use parallel.tp = 1 with dp and ZeRO 1-3",
                                     c.parallel.tp));
  c.memory.limit_mb = r.in_range("memory.limit_mb", 0.0, std::numeric_limits<double>::max(), false);
  c.offload.optimizer_state = r.choice("offload.optimizer_state", {"none", "disk"});
  c.offload.path = r.string("offload.path");
  c.offload.unit_mb = r.positive("offload.unit_mb");
  c.offload.prefetch = r.small_int("offload.prefetch", 0, 64);
  c.precision = r.choice("precision", {"fp32", "bf16", "fp16"});
  c.device = r.string("device");
  try {
    parse_device(c.device);
  } catch (const Error&) {
    r.error("device", fmt::format("must be \"cpu\", \"cuda\", \"cuda:N\" or \"guarded\" (the test "
                                  "device); got \"{}\"", c.device));
  }
  if (c.offload.optimizer_state != "none" && c.device != "cpu")
    r.error("offload.optimizer_state", fmt::format("= \"{}\" updates on the CPU; with device = "
                                                   "\"{}\" the optimizer state stays in the "
                                                   "device's memory for now", c.offload.optimizer_state,
                                                   c.device));
  c.lora.base_dtype = r.choice("lora.base_dtype", {"fp32", "bf16", "fp16"});
  if (c.lora.base_dtype != "fp32" && c.lora.base_dtype != c.precision)
    r.error("lora.base_dtype", fmt::format("\"{}\" holds the frozen base in the 16-bit copy a "
                                           "mixed-precision run computes with, so it needs precision "
                                           "= \"{}\" (the run has \"{}\")", c.lora.base_dtype,
                                           c.lora.base_dtype, c.precision));
  if (c.lora.base_dtype != "fp32" && c.lora.rank == 0)
    r.error("lora.base_dtype", "applies to LoRA's frozen base: set lora.rank > 0, or leave it \"fp32\"");
  c.loss_scale.initial = r.positive("loss_scale.initial");
  c.loss_scale.growth_interval = r.integer("loss_scale.growth_interval", 1, INT64_MAX);
  c.loss_scale.hysteresis = r.small_int("loss_scale.hysteresis", 1);
  c.loss_scale.min = r.positive("loss_scale.min");
  if (c.loss_scale.min > c.loss_scale.initial)
    r.error("loss_scale.min", fmt::format("({}) must not exceed loss_scale.initial ({})",
                                          c.loss_scale.min, c.loss_scale.initial));
  c.loss_scale.max_consecutive_skips = r.integer("loss_scale.max_consecutive_skips", 1, INT64_MAX);
  c.recompute = r.string("recompute");
  try {
    parse_recompute(c.recompute);
  } catch (const Error& e) {
    r.error("recompute", fmt::format("must be none, full, every:K (K >= 1) or selective; got "
                                     "\"{}\"{}", c.recompute,
                                     did_you_mean(c.recompute, {"none", "full", "selective"})));
  }
  c.deterministic = r.boolean("deterministic");

  c.checkpoint.dir = r.string("checkpoint.dir");
  c.checkpoint.every = r.integer("checkpoint.every", 0, INT64_MAX);
  c.checkpoint.keep_last = r.small_int("checkpoint.keep_last", 0);
  c.checkpoint.milestone_every = r.integer("checkpoint.milestone_every", 0, INT64_MAX);
  c.checkpoint.async = r.boolean("checkpoint.async");
  c.checkpoint.memory_every = r.integer("checkpoint.memory_every", 0, INT64_MAX);
  c.checkpoint.memory_dir = r.string("checkpoint.memory_dir");
  if (c.checkpoint.memory_every > 0 && c.checkpoint.memory_dir.empty())
    r.error("checkpoint.memory_dir", "must name a directory in node-local memory (a tmpfs such "
            "as /dev/shm) when checkpoint.memory_every is set");
  c.checkpoint.resume = r.string("checkpoint.resume");
  if (c.checkpoint.resume.empty())
    r.error("checkpoint.resume", "must be \"auto\", \"never\" or a checkpoint directory, got \"\"");
  c.telemetry.dir = r.string("telemetry.dir");
  c.telemetry.trace = r.boolean("telemetry.trace");
  c.telemetry.price_per_device_hour = r.in_range(
      "telemetry.price_per_device_hour", 0.0, std::numeric_limits<double>::max(), false);
  c.telemetry.peak_gflops =
      r.in_range("telemetry.peak_gflops", 0.0, std::numeric_limits<double>::max(), false);
  c.comm.transport = r.choice("comm.transport", {"auto", "shm", "mpi", "nccl", "tcp"});
  c.comm.timeout_s = r.positive("comm.timeout_s");
  c.comm.grad_dtype = r.choice("comm.grad_dtype", {"f32", "bf16"});
  c.comm.compression.type = r.choice("comm.compression.type", {"none", "powersgd", "topk", "sign"});
  c.comm.compression.rank = r.small_int("comm.compression.rank", 1, 4096);
  c.comm.compression.ratio = r.in_range("comm.compression.ratio", 0.0, 1.0, false);
  if (c.comm.compression.ratio <= 0) r.error("comm.compression.ratio", "must be > 0 (a fraction of each bucket)");
  c.comm.compression.warmup_steps = r.integer("comm.compression.warmup_steps", 0, INT64_MAX);
  c.comm.compression.error_feedback = r.boolean("comm.compression.error_feedback");
  if (c.comm.compression.type != "none" && c.comm.grad_dtype != "f32")
    r.error("comm.compression.type", fmt::format("= \"{}\" encodes f32 gradients itself: set comm.grad_dtype "
            "= \"f32\" (it is \"{}\")", c.comm.compression.type, c.comm.grad_dtype));
  if (const int64_t h = c.parallel.local_sgd.sync_every; h > 0) {
    // Saving and sampling read the averaged model: keep them on averages.
    auto on_average = [&](const char* key, int64_t every) {
      if (every > 0 && every % h != 0)
        r.error(key, fmt::format("= {} is not a multiple of parallel.local_sgd.sync_every = {}: the "
                                 "ranks' replicas differ between averages", every, h));
    };
    on_average("checkpoint.every", c.checkpoint.every);
    on_average("train.sample_every", c.train.sample_every);
    on_average("train.steps", c.train.steps);
    if (c.zero.stage > 0)
      r.error("parallel.local_sgd.sync_every", fmt::format("> 0 with zero.stage = {}: local SGD keeps a whole "
              "replica and optimizer state on every rank, which ZeRO shards; use zero.stage = 0", c.zero.stage));
    if (c.comm.compression.type != "none")
      r.error("parallel.local_sgd.sync_every", "> 0 with comm.compression: local SGD sends no gradients to compress");
  }
  if (c.parallel.parameter_server.enabled) check_parameter_server(c, r);
  c.run_name = r.string("run_name");
  if (c.run_name.empty() || c.run_name.find('/') != std::string::npos)
    r.error("run_name", fmt::format("must be a non-empty name without '/', got \"{}\"", c.run_name));
  c.out = r.string("out");
  check_model(c, r);
  return c;
}

}  // namespace meshtrain
