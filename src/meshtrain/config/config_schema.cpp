#include "meshtrain/config/config_schema.h"

#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>

#include "meshtrain/core/device.h"

namespace meshtrain {

namespace {

using Rule = std::function<nlohmann::json(const ConfigReader&, const std::string&)>;

constexpr int64_t kMax = INT64_MAX;
constexpr double kHuge = std::numeric_limits<double>::max();

// ---- the rules: each reads one key through the reader, checking it.
Rule integer(int64_t lo, int64_t hi = INT32_MAX) {
  return [=](const ConfigReader& r, const std::string& p) { return nlohmann::json(r.integer(p, lo, hi)); };
}
Rule number() {
  return [](const ConfigReader& r, const std::string& p) { return nlohmann::json(r.number(p)); };
}
Rule positive() {
  return [](const ConfigReader& r, const std::string& p) { return nlohmann::json(r.positive(p)); };
}
Rule in_range(double lo, double hi, bool hi_open = false) {
  return [=](const ConfigReader& r, const std::string& p) { return nlohmann::json(r.in_range(p, lo, hi, hi_open)); };
}
Rule boolean() {
  return [](const ConfigReader& r, const std::string& p) { return nlohmann::json(r.boolean(p)); };
}
Rule text() {
  return [](const ConfigReader& r, const std::string& p) { return nlohmann::json(r.string(p)); };
}
Rule choice(std::vector<std::string> allowed) {
  return [allowed = std::move(allowed)](const ConfigReader& r, const std::string& p) {
    return nlohmann::json(r.choice(p, allowed));
  };
}
// A rule, then a check of the value it read (which throws through r.error).
Rule checked(Rule rule, std::function<void(const nlohmann::json&, const ConfigReader&, const std::string&)> check) {
  return [=](const ConfigReader& r, const std::string& p) {
    nlohmann::json v = rule(r, p);
    check(v, r, p);
    return v;
  };
}

// One key on the TrainConfig field `field` (a lambda returning a reference
// to it from a const or mutable config), read by `rule`.
template <class Field>
ConfigKey key(std::string path, Field field, Rule rule) {
  ConfigKey k;
  k.path = path;
  k.value = [field](const TrainConfig& c) { return nlohmann::ordered_json(field(c)); };
  k.read = [field, rule = std::move(rule), path](TrainConfig& c, const ConfigReader& r) {
    using T = std::remove_cvref_t<decltype(field(c))>;
    field(c) = rule(r, path).template get<T>();
  };
  return k;
}

// parallel.dp: "auto" (0), a positive integer, or its decimal string (--set).
ConfigKey data_parallel_key() {
  ConfigKey k;
  k.path = "parallel.dp";
  k.value = [](const TrainConfig& c) {
    return c.parallel.dp == 0 ? nlohmann::ordered_json("auto") : nlohmann::ordered_json(c.parallel.dp);
  };
  k.read = [](TrainConfig& c, const ConfigReader& r) {
    const nlohmann::json& dp = r.at("parallel.dp");
    auto bad = [&] { r.error("parallel.dp", "must be \"auto\" or an integer >= 1, got " + dp.dump()); };
    if (dp.is_string() && dp.get<std::string>() == "auto") {
      c.parallel.dp = 0;
    } else if (dp.is_string()) {
      const std::string s = dp.get<std::string>();
      if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string::npos || std::stoi(s) < 1)
        bad();
      c.parallel.dp = std::stoi(s);
    } else if (dp.is_number()) {
      c.parallel.dp = r.small_int("parallel.dp", 1);
    } else {
      bad();
    }
  };
  return k;
}

// The field of a config, from a const or a mutable one.
#define MT_FIELD(member) [](auto& c) -> auto& { return c.member; }

// The model section: the family and preset, then each family's own keys
// (decoders' dimensions, Llama's, image models'), all "0 = the preset's".
void model_keys(std::vector<ConfigKey>& k) {
  k.push_back(key("model.family", MT_FIELD(model.family),
                  checked(text(), [](const nlohmann::json& v, const ConfigReader& r, const std::string& p) {
                    if (!v.get<std::string>().empty()) r.choice(p, {"gpt", "llama", "resnet"});
                  })));
  k.push_back(key("model.preset", MT_FIELD(model.preset), text()));
  k.push_back(key("model.n_layer", MT_FIELD(model.n_layer), integer(0)));
  k.push_back(key("model.n_head", MT_FIELD(model.n_head), integer(0)));
  k.push_back(key("model.n_embd", MT_FIELD(model.n_embd), integer(0)));
  k.push_back(key("model.seq_len", MT_FIELD(model.seq_len), integer(0)));
  k.push_back(key("model.vocab_size", MT_FIELD(model.vocab_size), integer(0)));
  k.push_back(key("model.n_kv_head", MT_FIELD(model.n_kv_head), integer(0)));
  k.push_back(key("model.ffn_hidden", MT_FIELD(model.ffn_hidden), integer(0)));
  k.push_back(key("model.rope_theta", MT_FIELD(model.rope_theta),
                  checked(number(), [](const nlohmann::json& v, const ConfigReader& r, const std::string& p) {
                    if (v.get<double>() < 0) r.error(p, "must be >= 0 (0 = the preset's)");
                  })));
  k.push_back(key("model.sync_bn", MT_FIELD(model.sync_bn), boolean()));
  // Image models' shape (0 = the preset's).
  k.push_back(key("model.num_classes", MT_FIELD(model.num_classes), integer(0)));
  k.push_back(key("model.image_size", MT_FIELD(model.image_size), integer(0)));
  k.push_back(key("model.in_channels", MT_FIELD(model.in_channels), integer(0)));
  k.push_back(key("model.width", MT_FIELD(model.width), integer(0)));
  k.push_back(key("init_from", MT_FIELD(init_from), text()));
  k.push_back(key("data.train", MT_FIELD(data.train), text()));
  k.push_back(key("data.val", MT_FIELD(data.val), text()));
  k.push_back(key("data.workers", MT_FIELD(data.workers), integer(1, 256)));
}

void train_keys(std::vector<ConfigKey>& k) {
  k.push_back(key("train.micro_batch", MT_FIELD(train.micro_batch), integer(1)));
  k.push_back(key("train.grad_accum", MT_FIELD(train.grad_accum), integer(1)));
  k.push_back(key("train.steps", MT_FIELD(train.steps), integer(0, kMax)));
  k.push_back(key("train.lr", MT_FIELD(train.lr), positive()));
  k.push_back(key("train.min_lr_ratio", MT_FIELD(train.min_lr_ratio), in_range(0.0, 1.0)));
  k.push_back(key("train.warmup", MT_FIELD(train.warmup), integer(0, kMax)));
  k.push_back(key("train.schedule", MT_FIELD(train.schedule), choice({"cosine", "linear", "constant"})));
  k.push_back(key("train.optimizer", MT_FIELD(train.optimizer), choice({"adamw", "sgd", "lars", "lamb"})));
  k.push_back(key("train.weight_decay", MT_FIELD(train.weight_decay), in_range(0.0, 1e9)));
  k.push_back(key("train.momentum", MT_FIELD(train.momentum), in_range(0.0, 1.0, true)));
  k.push_back(key("train.nesterov", MT_FIELD(train.nesterov), boolean()));
  k.push_back(key("train.trust_coefficient", MT_FIELD(train.trust_coefficient), positive()));
  k.push_back(key("train.trust_clip", MT_FIELD(train.trust_clip), in_range(0.0, 1e9)));
  k.push_back(key("train.exclude_norms_and_biases", MT_FIELD(train.exclude_norms_and_biases), boolean()));
  k.push_back(key("train.beta1", MT_FIELD(train.beta1), in_range(0.0, 1.0, true)));
  k.push_back(key("train.beta2", MT_FIELD(train.beta2), in_range(0.0, 1.0, true)));
  k.push_back(key("train.eps", MT_FIELD(train.eps), positive()));
  k.push_back(key("train.clip", MT_FIELD(train.clip), in_range(0.0, kHuge)));
  k.push_back(key("train.eval_every", MT_FIELD(train.eval_every), integer(0, kMax)));
  k.push_back(key("train.eval_batches", MT_FIELD(train.eval_batches), integer(1)));
  k.push_back(key("train.seed", MT_FIELD(train.seed), integer(0, kMax)));
  k.push_back(key("train.threads", MT_FIELD(train.threads), integer(0, 4096)));
  k.push_back(key("train.log_every", MT_FIELD(train.log_every), integer(1, kMax)));
  k.push_back(key("train.sample_every", MT_FIELD(train.sample_every), integer(0, kMax)));
  k.push_back(key("train.max_minutes", MT_FIELD(train.max_minutes), in_range(0.0, 1e7)));
  k.push_back(key("train.save_every", MT_FIELD(train.save_every), integer(0, kMax)));
  k.push_back(key("train.lr_scaling", MT_FIELD(train.lr_scaling), choice({"none", "linear", "sqrt"})));
  k.push_back(key("train.lr_base_batch", MT_FIELD(train.lr_base_batch), integer(0, kMax)));
}

void parallel_keys(std::vector<ConfigKey>& k) {
  k.push_back(data_parallel_key());
  k.push_back(key("parallel.tp", MT_FIELD(parallel.tp), integer(1)));
  k.push_back(key("parallel.pp", MT_FIELD(parallel.pp), integer(1)));
  k.push_back(key("parallel.schedule", MT_FIELD(parallel.schedule), choice({"gpipe", "1f1b", "interleaved", "zb-h1"})));
  k.push_back(key("parallel.chunks", MT_FIELD(parallel.chunks), integer(1)));
  k.push_back(key("parallel.stage_layers", MT_FIELD(parallel.stage_layers), text()));
  k.push_back(key("parallel.bucket_mb", MT_FIELD(parallel.bucket_mb), in_range(1e-6, 1e6)));
  k.push_back(key("parallel.first_bucket_mb", MT_FIELD(parallel.first_bucket_mb), in_range(1e-6, 1e6)));
  k.push_back(key("parallel.local_sgd.sync_every", MT_FIELD(parallel.local_sgd.sync_every), integer(0, kMax)));
  k.push_back(key("parallel.local_sgd.outer_lr", MT_FIELD(parallel.local_sgd.outer_lr), positive()));
  k.push_back(key("parallel.local_sgd.outer_momentum", MT_FIELD(parallel.local_sgd.outer_momentum),
                  in_range(0.0, 1.0, true)));
  k.push_back(key("parallel.local_sgd.nesterov", MT_FIELD(parallel.local_sgd.nesterov), boolean()));
  k.push_back(key("parallel.parameter_server.enabled", MT_FIELD(parallel.parameter_server.enabled), boolean()));
  k.push_back(key("parallel.parameter_server.staleness", MT_FIELD(parallel.parameter_server.staleness),
                  integer(0, 1000000)));
  k.push_back(key("parallel.parameter_server.staleness_lr", MT_FIELD(parallel.parameter_server.staleness_lr),
                  boolean()));
  k.push_back(key("parallel.sequence_parallel", MT_FIELD(parallel.sequence_parallel), boolean()));
  k.push_back(key("zero.stage", MT_FIELD(zero.stage), integer(0, 3)));
  k.push_back(key("zero.persist_threshold", MT_FIELD(zero.persist_threshold), integer(0, kMax)));
}

void memory_and_precision_keys(std::vector<ConfigKey>& k) {
  k.push_back(key("lora.rank", MT_FIELD(lora.rank), integer(0, 4096)));
  k.push_back(key("lora.alpha", MT_FIELD(lora.alpha), positive()));
  k.push_back(key("lora.targets", MT_FIELD(lora.targets),
                  checked(text(), [](const nlohmann::json& v, const ConfigReader& r, const std::string& p) {
                    if (v.get<std::string>().empty()) r.error(p, "must be \"all\" or names such as \"q_proj,v_proj\"");
                  })));
  k.push_back(key("lora.base_dtype", MT_FIELD(lora.base_dtype), choice({"fp32", "bf16", "fp16"})));
  k.push_back(key("memory.limit_mb", MT_FIELD(memory.limit_mb), in_range(0.0, kHuge)));
  k.push_back(key("offload.optimizer_state", MT_FIELD(offload.optimizer_state), choice({"none", "disk"})));
  k.push_back(key("offload.path", MT_FIELD(offload.path), text()));
  k.push_back(key("offload.unit_mb", MT_FIELD(offload.unit_mb), positive()));
  k.push_back(key("offload.prefetch", MT_FIELD(offload.prefetch), integer(0, 64)));
  k.push_back(key("precision", MT_FIELD(precision), choice({"fp32", "bf16", "fp16"})));
  k.push_back(key("device", MT_FIELD(device),
                  checked(text(), [](const nlohmann::json& v, const ConfigReader& r, const std::string& p) {
                    try {
                      parse_device(v.get<std::string>());
                    } catch (const Error&) {
                      r.error(p, fmt::format("must be \"cpu\", \"cuda\", \"cuda:N\" or \"guarded\" (the test "
                                             "device); got \"{}\"", v.get<std::string>()));
                    }
                  })));
  k.push_back(key("loss_scale.initial", MT_FIELD(loss_scale.initial), positive()));
  k.push_back(key("loss_scale.growth_interval", MT_FIELD(loss_scale.growth_interval), integer(1, kMax)));
  k.push_back(key("loss_scale.hysteresis", MT_FIELD(loss_scale.hysteresis), integer(1)));
  k.push_back(key("loss_scale.min", MT_FIELD(loss_scale.min), positive()));
  k.push_back(key("loss_scale.max_consecutive_skips", MT_FIELD(loss_scale.max_consecutive_skips), integer(1, kMax)));
  k.push_back(key("recompute", MT_FIELD(recompute),
                  checked(text(), [](const nlohmann::json& v, const ConfigReader& r, const std::string& p) {
                    const std::string s = v.get<std::string>();
                    try {
                      parse_recompute(s);
                    } catch (const Error&) {
                      r.error(p, fmt::format("must be none, full, every:K (K >= 1) or selective; got \"{}\"{}", s,
                                             did_you_mean(s, {"none", "full", "selective"})));
                    }
                  })));
  k.push_back(key("deterministic", MT_FIELD(deterministic), boolean()));
}

void run_keys(std::vector<ConfigKey>& k) {
  k.push_back(key("checkpoint.dir", MT_FIELD(checkpoint.dir), text()));
  k.push_back(key("checkpoint.every", MT_FIELD(checkpoint.every), integer(0, kMax)));
  k.push_back(key("checkpoint.keep_last", MT_FIELD(checkpoint.keep_last), integer(0)));
  k.push_back(key("checkpoint.milestone_every", MT_FIELD(checkpoint.milestone_every), integer(0, kMax)));
  k.push_back(key("checkpoint.async", MT_FIELD(checkpoint.async), boolean()));
  k.push_back(key("checkpoint.memory_every", MT_FIELD(checkpoint.memory_every), integer(0, kMax)));
  k.push_back(key("checkpoint.memory_dir", MT_FIELD(checkpoint.memory_dir), text()));
  k.push_back(key("checkpoint.resume", MT_FIELD(checkpoint.resume),
                  checked(text(), [](const nlohmann::json& v, const ConfigReader& r, const std::string& p) {
                    if (v.get<std::string>().empty())
                      r.error(p, "must be \"auto\", \"never\" or a checkpoint directory, got \"\"");
                  })));
  k.push_back(key("telemetry.dir", MT_FIELD(telemetry.dir), text()));
  k.push_back(key("telemetry.trace", MT_FIELD(telemetry.trace), boolean()));
  k.push_back(key("telemetry.price_per_device_hour", MT_FIELD(telemetry.price_per_device_hour), in_range(0.0, kHuge)));
  k.push_back(key("telemetry.peak_gflops", MT_FIELD(telemetry.peak_gflops), in_range(0.0, kHuge)));
  k.push_back(key("comm.transport", MT_FIELD(comm.transport), choice({"auto", "shm", "mpi", "nccl", "tcp"})));
  k.push_back(key("comm.timeout_s", MT_FIELD(comm.timeout_s), positive()));
  k.push_back(key("comm.grad_dtype", MT_FIELD(comm.grad_dtype), choice({"f32", "bf16"})));
  k.push_back(key("comm.compression.type", MT_FIELD(comm.compression.type), choice({"none", "powersgd", "topk", "sign"})));
  k.push_back(key("comm.compression.rank", MT_FIELD(comm.compression.rank), integer(1, 4096)));
  k.push_back(key("comm.compression.ratio", MT_FIELD(comm.compression.ratio),
                  checked(in_range(0.0, 1.0), [](const nlohmann::json& v, const ConfigReader& r, const std::string& p) {
                    if (v.get<double>() <= 0) r.error(p, "must be > 0 (a fraction of each bucket)");
                  })));
  k.push_back(key("comm.compression.warmup_steps", MT_FIELD(comm.compression.warmup_steps), integer(0, kMax)));
  k.push_back(key("comm.compression.error_feedback", MT_FIELD(comm.compression.error_feedback), boolean()));
  k.push_back(key("run_name", MT_FIELD(run_name),
                  checked(text(), [](const nlohmann::json& v, const ConfigReader& r, const std::string& p) {
                    const std::string s = v.get<std::string>();
                    if (s.empty() || s.find('/') != std::string::npos)
                      r.error(p, fmt::format("must be a non-empty name without '/', got \"{}\"", s));
                  })));
  k.push_back(key("out", MT_FIELD(out), text()));
}

#undef MT_FIELD

}  // namespace

const std::vector<ConfigKey>& config_schema() {
  static const std::vector<ConfigKey> keys = [] {
    std::vector<ConfigKey> k;
    model_keys(k);
    train_keys(k);
    parallel_keys(k);
    memory_and_precision_keys(k);
    run_keys(k);
    return k;
  }();
  return keys;
}

}  // namespace meshtrain
