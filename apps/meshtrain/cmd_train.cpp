// `meshtrain train --config FILE [--set key=value]...`
#include <fmt/format.h>

#include "commands.h"
#include "meshtrain/config/config_loader.h"
#include "meshtrain/core/threads.h"
#include "meshtrain/io/gpt_model_file.h"
#include "meshtrain/train/trainer.h"

namespace meshtrain::cli {

namespace {
struct TrainArgs {
  std::string config;
  std::vector<std::string> sets;
};

// The model shape: a preset, explicit dimensions overriding it, or the shape
// recorded in the init_from model file.
GPTConfig model_config(const TrainConfig& c) {
  GPTConfig g;
  if (!c.init_from.empty()) {
    g = read_gpt_config(c.init_from, c.model.n_head);
  } else if (!c.model.preset.empty()) {
    g = gpt_preset(c.model.preset);
  }
  auto take = [](int& dst, int v) { if (v > 0) dst = v; };
  const GPTConfig before = g;
  take(g.n_layer, c.model.n_layer);
  take(g.n_head, c.model.n_head);
  take(g.n_embd, c.model.n_embd);
  take(g.seq_len, c.model.seq_len);
  take(g.vocab_size, c.model.vocab_size);
  if (!c.init_from.empty()) {
    MT_CHECK(g.n_layer == before.n_layer && g.n_embd == before.n_embd &&
             g.vocab_size == before.vocab_size && g.seq_len == before.seq_len,
             "model.* settings disagree with the model in init_from {} ({}); remove them or "
             "match the file", c.init_from, before.describe());
  }
  g.padded_vocab = pad_vocab(g.vocab_size);
  g.validate();
  return g;
}

// Settings whose machinery lands in later versions are refused, not ignored.
void refuse_unavailable(const TrainConfig& c) {
  auto refuse = [](bool cond, const std::string& what) {
    if (cond) throw Error(what + " is not available in this build yet (single-process fp32 "
                                 "training); remove the setting to train");
  };
  refuse(c.zero.stage != 0, fmt::format("zero.stage = {}", c.zero.stage));
  refuse(c.precision != "fp32", fmt::format("precision = \"{}\"", c.precision));
  refuse(c.recompute != "none", fmt::format("recompute = \"{}\"", c.recompute));
  refuse(c.parallel.tp != 1 || c.parallel.pp != 1 || c.parallel.dp > 1,
         fmt::format("parallel = dp {} x tp {} x pp {}", c.parallel.dp, c.parallel.tp, c.parallel.pp));
  refuse(c.checkpoint.every > 0, fmt::format("checkpoint.every = {} (sharded checkpoints; use "
                                             "train.save_every to save the model periodically)",
                                             c.checkpoint.every));
  refuse(c.telemetry.trace, "telemetry.trace = true");
}

void run_train(const TrainArgs& a) {
  TrainConfig c = load_config(a.config, a.sets);
  fmt::print("resolved configuration:\n{}\n", to_string(c));
  refuse_unavailable(c);
  MT_CHECK(!c.data.train.empty(), "data.train is empty: give a glob of training shards (make "
           "them with `meshtrain data prepare` or `meshtrain data synth`)");
  set_thread_count(c.train.threads > 0 ? c.train.threads : default_thread_count());

  TrainerOptions o;
  o.model = model_config(c);
  o.init_from = c.init_from;
  o.train_pattern = c.data.train;
  o.val_pattern = c.data.val;
  o.micro_batch = c.train.micro_batch;
  o.grad_accum = c.train.grad_accum;
  o.steps = c.train.steps;
  o.schedule.kind = c.train.schedule;
  o.schedule.max_lr = static_cast<float>(c.train.lr);
  o.schedule.min_lr_ratio = static_cast<float>(c.train.min_lr_ratio);
  o.schedule.warmup = c.train.warmup;
  o.schedule.total = c.train.steps;
  o.adam.beta1 = static_cast<float>(c.train.beta1);
  o.adam.beta2 = static_cast<float>(c.train.beta2);
  o.adam.eps = static_cast<float>(c.train.eps);
  o.adam.weight_decay = static_cast<float>(c.train.weight_decay);
  o.clip = static_cast<float>(c.train.clip);
  o.eval_every = c.train.eval_every;
  o.eval_batches = c.train.eval_batches;
  o.log_every = c.train.log_every;
  o.sample_every = c.train.sample_every;
  o.save_every = c.train.save_every;
  o.seed = c.train.seed;
  o.run_dir = c.telemetry.dir;
  o.model_out = c.out;
  o.resolved_config_json = resolved_json(c).dump(2);
  run_trainer(o);
}
}  // namespace

void register_train(CLI::App& app) {
  auto a = std::make_shared<TrainArgs>();
  auto* c = app.add_subcommand("train", "Train a model from a JSON configuration");
  c->add_option("--config", a->config, "Configuration file (JSON; keys in docs/CONFIG.md)");
  c->add_option("--set", a->sets, "Override one key, e.g. --set train.lr=3e-4 (repeatable)")
      ->take_all();
  c->callback([a] { run_train(*a); });
}

}  // namespace meshtrain::cli
