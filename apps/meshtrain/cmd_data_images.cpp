// `meshtrain data prepare-images`: an image-folder tree or IDX files ->
// WebDataset shards (data/image_prepare.h).
#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <string>

#include "commands.h"
#include "meshtrain/core/error.h"
#include "meshtrain/data/image_prepare.h"

namespace meshtrain::cli {

namespace {

void run_prepare_images(const data::ImagePrepareOptions& o, const std::string& on_corrupt) {
  if (o.folder.empty() == o.idx_dir.empty())
    throw UsageError("give exactly one of --folder DIR and --idx-dir DIR");
  if (o.val_fraction < 0.0 || o.val_fraction >= 1.0)
    throw UsageError(fmt::format("--val-fraction must be in [0, 1), got {}", o.val_fraction));
  if (o.shard_samples < 1)
    throw UsageError(fmt::format("--shard-samples must be >= 1, got {}", o.shard_samples));
  if (o.limit < 0) throw UsageError(fmt::format("--limit must be >= 0, got {}", o.limit));
  if (o.threads < 0) throw UsageError(fmt::format("--threads must be >= 0, got {}", o.threads));
  data::ImagePrepareOptions opts = o;
  opts.skip_corrupt = on_corrupt == "skip";
  const data::ImagePrepareResult r = data::prepare_images(opts);
  for (const std::string& s : r.skipped) fmt::print("skipped {}\n", s);
  fmt::print("source {} {}: {} classes", r.source, r.source == "idx" ? o.idx_dir : o.folder,
             r.classes.size());
  if (!r.classes.empty())
    fmt::print(" ({}{})", fmt::join(r.classes.begin(),
                                    r.classes.begin() + std::min<size_t>(r.classes.size(), 10),
                                    ", "),
               r.classes.size() > 10 ? ", ..." : "");
  fmt::print("\n");
  for (const data::ImageSplitResult& s : r.splits) {
    fmt::print("{:<5}  {:>9} images in {} shard(s), {:.1f} MB", s.name, s.samples,
               s.shards.size(), s.bytes / 1e6);
    if (!s.shards.empty())
      fmt::print(": {}{}", s.shards.front(), s.shards.size() > 1 ? " ..." : "");
    fmt::print("\n");
  }
  if (r.width > 0)
    fmt::print("images {}x{} (width x height), {} channel(s)\n", r.width, r.height, r.channels);
  else
    fmt::print("images of mixed sizes, {} channel(s)\n", r.channels);
  if (r.ignored_files > 0)
    fmt::print("ignored {} file(s) that are not .jpg, .jpeg or .png\n", r.ignored_files);
  fmt::print("skipped {} corrupt image(s)\n", r.skipped.size());
  fmt::print("wrote {} (seed {}) in {:.2f} s\n", r.meta_path, o.seed, r.seconds);
}

}  // namespace

void register_data_images(CLI::App* data_cmd) {
  auto o = std::make_shared<data::ImagePrepareOptions>();
  auto on_corrupt = std::make_shared<std::string>("fail");
  CLI::App* cmd = data_cmd->add_subcommand(
      "prepare-images",
      "Image folders (DIR/<class>/*.jpg|png, as torchvision's ImageFolder) or IDX files "
      "(MNIST, Fashion-MNIST) -> WebDataset shards DIR/train-000000.tar ... and DIR/meta.json");
  cmd->add_option("--folder", o->folder,
                  "Image-folder tree: one sub-folder per class (sorted names give the class "
                  "indexes); with train/ and val/ sub-trees those are the splits");
  cmd->add_option("--idx-dir", o->idx_dir,
                  "Folder of IDX files: train-images-idx3-ubyte[.gz], train-labels-idx1-ubyte[.gz], "
                  "t10k-* -> splits train and test (e.g. /usr/share/datasets/fashion-mnist)");
  cmd->add_option("--out", o->out_dir, "Output folder")->required();
  cmd->add_option("--val-fraction", o->val_fraction,
                  "Folders without train/ and val/: share of images held out for validation")
      ->capture_default_str();
  cmd->add_option("--shard-samples", o->shard_samples, "Samples per shard at most")
      ->capture_default_str();
  cmd->add_option("--on-corrupt", *on_corrupt,
                  "fail: stop at the first corrupt image, naming it; skip: leave it out and "
                  "report it")
      ->check(CLI::IsMember({"fail", "skip"}))
      ->capture_default_str();
  cmd->add_option("--seed", o->seed, "Seed of the validation choice and of the shuffle")
      ->capture_default_str();
  cmd->add_option("--limit", o->limit,
                  "At most this many images per split (the first of the shuffled order; 0 = all)")
      ->capture_default_str();
  cmd->add_option("--threads", o->threads, "Decoding/encoding threads (0 = all cores)")
      ->capture_default_str();
  cmd->callback([o, on_corrupt] { run_prepare_images(*o, *on_corrupt); });
}

}  // namespace meshtrain::cli
