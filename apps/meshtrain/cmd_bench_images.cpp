// `meshtrain bench images`: the image input pipeline alone (data/image_source.h:
// shard reading, JPEG/PNG decoding, the training augmentation or the
// evaluation view, normalization, on `--workers` threads behind the
// prefetcher), as training runs it, without a model. Prints images/s of wall
// time and images per CPU-second of this process (all its threads), the
// figure comparable across worker counts and with a single-threaded peer.
// The peer is bench/images_vs_torchvision.py's torchvision transforms on the
// same JPEG files.
#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <string>

#include "bench_clock.h"
#include "commands.h"
#include "meshtrain/core/error.h"
#include "meshtrain/data/image_source.h"

namespace meshtrain::cli {

namespace {

struct BenchImagesArgs {
  std::string data;
  int size = 224, batch = 32, workers = 2, prefetch = 2;
  double seconds = 5;
  bool eval = false, json = false;
};

struct PipelineRate {
  int64_t images = 0;
  double wall_s = 0, cpu_s = 0;
};

PipelineRate time_pipeline(const BenchImagesArgs& a) {
  data::LoaderOptions o;
  o.pattern = a.data;
  o.batch = a.batch;
  o.mode = a.eval ? data::LoaderMode::Eval : data::LoaderMode::Train;
  o.prefetch = a.prefetch;
  o.workers = a.workers;
  o.sample_shape = {3, a.size, a.size};
  o.classes = 1 << 30;  // any label: no model here
  data::ImageSource source(o);
  source.next();  // the first batch: shard mapping and thread start-up are not the rate
  PipelineRate r;
  const double wall0 = now_s(), cpu0 = process_cpu_s();
  do {
    r.images += source.next().inputs.dim(0);
    r.wall_s = now_s() - wall0;
  } while (r.wall_s < a.seconds);
  r.cpu_s = process_cpu_s() - cpu0;
  return r;
}

void run_bench_images(const BenchImagesArgs& a) {
  MT_CHECK(a.size >= 8 && a.batch >= 1 && a.workers >= 1 && a.seconds > 0,
           "bench images: --size >= 8, --batch >= 1, --workers >= 1, --seconds > 0");
  const PipelineRate r = time_pipeline(a);
  const double per_s = r.images / r.wall_s, per_cpu_s = r.images / std::max(r.cpu_s, 1e-9);
  if (a.json) {
    nlohmann::json j{{"images", r.images},       {"wall_s", r.wall_s},     {"cpu_s", r.cpu_s},
                     {"images_per_s", per_s},    {"images_per_cpu_s", per_cpu_s},
                     {"workers", a.workers},     {"size", a.size},         {"eval", a.eval}};
    fmt::print("{}\n", j.dump());
    return;
  }
  fmt::print("{} view, {}x{}, {} worker(s): {} images in {:.2f} s: {:.1f} images/s, {:.1f} images "
             "per CPU-second ({:.2f} CPU-seconds used)\n",
             a.eval ? "evaluation" : "training", a.size, a.size, a.workers, r.images, r.wall_s,
             per_s, per_cpu_s, r.cpu_s);
}

}  // namespace

void register_bench_images(CLI::App& bench) {
  auto args = std::make_shared<BenchImagesArgs>();
  auto* cmd = bench.add_subcommand(
      "images", "Time the image input pipeline alone (decode, augment, normalize): images/s and "
                "images per CPU-second");
  cmd->add_option("--data", args->data, "image shards, e.g. 'data/pets/train-*.tar'")->required();
  cmd->add_option("--size", args->size, "output height = width")->capture_default_str();
  cmd->add_option("--batch", args->batch, "images per batch")->capture_default_str();
  cmd->add_option("--workers", args->workers, "decoding threads per batch")->capture_default_str();
  cmd->add_option("--prefetch", args->prefetch, "batches prepared ahead")->capture_default_str();
  cmd->add_option("--seconds", args->seconds, "time to run")->capture_default_str();
  cmd->add_flag("--eval", args->eval, "the evaluation view (resize + center crop) instead of training's");
  cmd->add_flag("--json", args->json, "one JSON line");
  cmd->callback([args] { run_bench_images(*args); });
}

}  // namespace meshtrain::cli
