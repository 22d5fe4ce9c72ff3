// `meshtrain eval`: score a saved model (any family: a meshtrain model file)
// on a data set, as training's evaluations do (train/evaluation.h): the mean
// loss and the model's measures (top-1, top-5 for classifiers) over the
// whole split or its first batches, in evaluation mode, on one process.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/threads.h"
#include "meshtrain/data/batch_source.h"
#include "meshtrain/io/model_file.h"
#include "meshtrain/train/evaluation.h"

namespace meshtrain::cli {

namespace {

struct EvalArgs {
  std::string model, data;
  int64_t batch = 64, batches = 0;
  int seq = 0, threads = 0;
  bool json = false;
};

void run_eval(const EvalArgs& a) {
  MT_CHECK(is_model_file(a.model), "--model {}: not a meshtrain model file (the model.safetensors "
           "`meshtrain train` writes, or `meshtrain ckpt export`'s)", a.model);
  MT_CHECK(a.batch >= 1 && a.batches >= 0, "--batch must be >= 1 and --batches >= 0");
  if (a.threads > 0) set_thread_count(a.threads);
  const auto spec = read_model_file_spec(a.model);
  auto model = spec->build();
  load_model_file(a.model, *spec, model->param_buffer());
  data::LoaderOptions lo;
  lo.pattern = a.data;
  lo.batch = a.batch;
  lo.seq_len = a.seq > 0 ? a.seq : spec->seq_len();
  lo.mode = data::LoaderMode::Eval;
  lo.prefetch = 0;
  if (spec->input() == ModelSpec::Input::Dense) {
    for (int64_t d : spec->sample_shape()) lo.sample_shape.push_back(d);
    lo.classes = spec->vocab_size();
  }
  auto source = data::open_batch_source(lo);
  const int64_t batches = a.batches > 0 ? a.batches : source->batches_per_epoch();
  MT_CHECK(batches >= 1, "--data {}: not one batch of {} sample(s) in it", a.data, a.batch);
  const Evaluation e = evaluate([&](const MicroBatch& mb) { return model->forward(mb); }, *model,
                                model.get(), *source, batches, nullptr);
  if (a.json) {
    nlohmann::json j{{"model", a.model}, {"data", a.data}, {"batches", batches},
                     {"samples", batches * a.batch}, {"loss", e.loss}};
    for (const auto& [name, value] : e.metrics) j[name] = value;
    fmt::print("{}\n", j.dump());
    return;
  }
  fmt::print("model: {}\n", spec->describe());
  fmt::print("data: {} ({} batch(es) of {}: {} samples scored)\n", source->describe(), batches,
             a.batch, batches * a.batch);
  std::string line = fmt::format("loss {:.4f}", e.loss);
  for (const auto& [name, value] : e.metrics) line += fmt::format(" | {} {:.2f}%", name, 100 * value);
  fmt::print("{}\n", line);
}

}  // namespace

void register_eval(CLI::App& app) {
  auto a = std::make_shared<EvalArgs>();
  auto* c = app.add_subcommand("eval", "Score a saved model on a data set (loss; top-1/top-5 for classifiers)");
  c->add_option("--model", a->model, "A meshtrain model file (model.safetensors of a run)")->required();
  c->add_option("--data", a->data,
                "Data: token shards (glob), image shards (*.tar of `data prepare-images`) or "
                "synthetic[:N] for image models")->required();
  c->add_option("--batch", a->batch, "Samples per batch")->capture_default_str();
  c->add_option("--batches", a->batches, "Batches to score; 0 = the whole split")->capture_default_str();
  c->add_option("--seq", a->seq, "Token models: window length (0 = the model's context)");
  c->add_option("--threads", a->threads, "Compute threads (0 = all cores)");
  c->add_flag("--json", a->json, "One JSON line instead of text");
  c->callback([a] { run_eval(*a); });
}

}  // namespace meshtrain::cli
