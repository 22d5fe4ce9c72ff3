#include "meshtrain/config/config_convert.h"

#include <algorithm>
#include <string>

#include "meshtrain/config/config_reader.h"
#include "meshtrain/config/config_schema.h"
#include "meshtrain/core/error.h"

namespace meshtrain {

namespace {

using nlohmann::json;

// The parameter server's workers take different numbers of steps with no
// collective between them: whatever needs every rank at the same step (or
// shards the model another way) is refused, each with its reason.
void check_parameter_server(const TrainConfig& c, const ConfigReader& r) {
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

void check_model(const TrainConfig& c, const ConfigReader& r) {
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

// The checks that relate several keys (each key's own are in its rule,
// config_schema.cpp).
void check_train(const TrainConfig& c, const ConfigReader& r) {
  const TrainSection& t = c.train;
  if (t.nesterov && t.momentum == 0)
    r.error("train.nesterov", "needs train.momentum > 0 (Nesterov momentum with no momentum)");
  if (t.lr_scaling != "none" && t.lr_base_batch == 0)
    r.error("train.lr_base_batch", fmt::format("must be >= 1 when train.lr_scaling is \"{}\" (the "
                                               "global batch in sequences train.lr was tuned at)",
                                               t.lr_scaling));
}

void check_parallel(const TrainConfig& c, const ConfigReader& r) {
  const ParallelSection& p = c.parallel;
  if (p.schedule == "interleaved" && p.chunks < 2)
    r.error("parallel.chunks", fmt::format("must be 2 or more under the interleaved schedule (model "
                                           "chunks per pipeline rank), got {}; set parallel.chunks = "
                                           "2, or parallel.schedule = \"1f1b\"", p.chunks));
  if (p.schedule == "interleaved" && c.train.grad_accum % std::max(1, p.pp) != 0)
    r.error("train.grad_accum", fmt::format("must be a multiple of parallel.pp = {} under the "
                                            "interleaved schedule (micro-batches go in rounds of the "
                                            "stages), got {}", p.pp, c.train.grad_accum));
  if (p.schedule == "zb-h1" && p.chunks > 1)
    r.error("parallel.chunks", fmt::format("= {} under zb-h1, which runs one chunk per pipeline rank; "
                                           "set parallel.chunks = 1", p.chunks));
  if (p.schedule == "1f1b" && p.chunks > 1)
    r.error("parallel.chunks", fmt::format("= {} under 1F1B is the interleaved schedule; set "
                                           "parallel.schedule = \"interleaved\"", p.chunks));
  if (c.lora.rank > 0 && p.tp > 1)
    r.error("lora.rank", fmt::format("LoRA with tensor parallelism (parallel.tp = {}) is not "
                                     "supported yet; use parallel.tp = 1 with dp and ZeRO 1-3", p.tp));
  if (const int64_t h = p.local_sgd.sync_every; h > 0) {
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
}

void check_precision_and_memory(const TrainConfig& c, const ConfigReader& r) {
  if (c.offload.optimizer_state != "none" && c.device != "cpu")
    r.error("offload.optimizer_state", fmt::format("= \"{}\" updates on the CPU; with device = "
                                                   "\"{}\" the optimizer state stays in the "
                                                   "device's memory for now", c.offload.optimizer_state,
                                                   c.device));
  if (c.lora.base_dtype != "fp32" && c.lora.base_dtype != c.precision)
    r.error("lora.base_dtype", fmt::format("\"{}\" holds the frozen base in the 16-bit copy a "
                                           "mixed-precision run computes with, so it needs precision "
                                           "= \"{}\" (the run has \"{}\")", c.lora.base_dtype,
                                           c.lora.base_dtype, c.precision));
  if (c.lora.base_dtype != "fp32" && c.lora.rank == 0)
    r.error("lora.base_dtype", "applies to LoRA's frozen base: set lora.rank > 0, or leave it \"fp32\"");
  if (c.loss_scale.min > c.loss_scale.initial)
    r.error("loss_scale.min", fmt::format("({}) must not exceed loss_scale.initial ({})",
                                          c.loss_scale.min, c.loss_scale.initial));
}

void check_checkpoint_and_comm(const TrainConfig& c, const ConfigReader& r) {
  if (c.checkpoint.memory_every > 0 && c.checkpoint.memory_dir.empty())
    r.error("checkpoint.memory_dir", "must name a directory in node-local memory (a tmpfs such "
            "as /dev/shm) when checkpoint.memory_every is set");
  if (c.comm.compression.type != "none" && c.comm.grad_dtype != "f32")
    r.error("comm.compression.type", fmt::format("= \"{}\" encodes f32 gradients itself: set comm.grad_dtype "
            "= \"f32\" (it is \"{}\")", c.comm.compression.type, c.comm.grad_dtype));
}

}  // namespace

TrainConfig convert_config(const nlohmann::json& j,
                           const std::function<std::string(const std::string&)>& origin) {
  const ConfigReader r(j, origin);
  TrainConfig c;
  for (const ConfigKey& k : config_schema()) k.read(c, r);
  check_train(c, r);
  check_parallel(c, r);
  check_precision_and_memory(c, r);
  check_checkpoint_and_comm(c, r);
  if (c.parallel.parameter_server.enabled) check_parameter_server(c, r);
  check_model(c, r);
  return c;
}

}  // namespace meshtrain
