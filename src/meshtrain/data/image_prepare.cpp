#include "meshtrain/data/image_prepare.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <regex>

#include "meshtrain/core/error.h"
#include "meshtrain/core/rng.h"
#include "meshtrain/data/idx_file.h"
#include "meshtrain/data/image_decode.h"
#include "meshtrain/data/image_shards.h"
#include "meshtrain/data/text_prepare.h"

namespace meshtrain::data {

namespace fs = std::filesystem;

namespace {

struct FileItem {
  std::string path;
  int64_t label = 0;
};

bool hidden(const fs::path& p) {
  const std::string n = p.filename().string();
  return !n.empty() && n[0] == '.';
}

bool image_extension(const fs::path& p) {
  std::string e = p.extension().string();
  std::transform(e.begin(), e.end(), e.begin(), [](unsigned char c) { return std::tolower(c); });
  return e == ".jpg" || e == ".jpeg" || e == ".png";
}

std::vector<std::string> class_folders(const fs::path& root) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(root, ec)) {
    if (hidden(e.path())) continue;
    if (e.is_directory()) names.push_back(e.path().filename().string());
  }
  if (ec) fail("cannot list '{}': {}", root.string(), ec.message());
  std::sort(names.begin(), names.end());
  return names;
}

// Every image file of every class under `root`, sorted by class then path.
std::vector<FileItem> collect_class_files(const fs::path& root,
                                          const std::vector<std::string>& classes,
                                          int64_t* ignored) {
  std::vector<FileItem> items;
  for (size_t c = 0; c < classes.size(); ++c) {
    const fs::path dir = root / classes[c];
    std::vector<std::string> files;
    std::error_code ec;
    auto it = fs::recursive_directory_iterator(
        dir, fs::directory_options::follow_directory_symlink, ec);
    if (ec) fail("cannot list '{}': {}", dir.string(), ec.message());
    for (; it != fs::recursive_directory_iterator(); it.increment(ec)) {
      if (ec) fail("cannot list '{}': {}", dir.string(), ec.message());
      if (hidden(it->path())) {
        if (it->is_directory()) it.disable_recursion_pending();
        continue;
      }
      if (!it->is_regular_file()) continue;
      if (image_extension(it->path()))
        files.push_back(it->path().string());
      else
        ++*ignored;
    }
    if (files.empty())
      fail("class folder '{}' holds no .jpg, .jpeg or .png file (ImageFolder refuses an empty "
           "class too; remove the folder or add images)", dir.string());
    std::sort(files.begin(), files.end());
    for (std::string& f : files) items.push_back({std::move(f), static_cast<int64_t>(c)});
  }
  return items;
}

// Seeded Fisher-Yates over the split (a stream per split name).
template <typename T>
void shuffle_items(std::vector<T>& v, uint64_t seed, const std::string& split) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a of the split name, mixed into the seed
  for (char c : split) h = (h ^ static_cast<uint8_t>(c)) * 1099511628211ull;
  Rng rng(seed ^ h);
  for (size_t i = v.size(); i > 1; --i) {
    const size_t j = static_cast<size_t>(rng.below(i));
    std::swap(v[i - 1], v[j]);
  }
}

// Per-channel pixel sums of one image (gray images count in all three).
struct PixelSums {
  double sum[3] = {0, 0, 0}, sq[3] = {0, 0, 0};
  int64_t pixels = 0;
  void add(const DecodedImage& img) {
    const size_t n = static_cast<size_t>(img.width) * img.height;
    for (size_t i = 0; i < n; ++i)
      for (int c = 0; c < 3; ++c) {
        const double v = img.pixels[i * img.channels + (img.channels == 1 ? 0 : c)] / 255.0;
        sum[c] += v;
        sq[c] += v * v;
      }
    pixels += static_cast<int64_t>(n);
  }
  void add(const PixelSums& o) {
    for (int c = 0; c < 3; ++c) sum[c] += o.sum[c], sq[c] += o.sq[c];
    pixels += o.pixels;
  }
};

struct Stats {
  int width = -1, height = -1;  // -1 unset, 0 mixed
  bool all_gray = true;
  PixelSums train;  // the training split's, for meta.json's mean and std
  void add(int w, int h, int channels) {
    if (width == -1) {
      width = w;
      height = h;
    } else if (width != w || height != h) {
      width = height = 0;
    }
    if (channels != 1) all_gray = false;
  }
};

void remove_stale_shards(const fs::path& out) {
  static const std::regex pattern(R"((train|val|test)-\d{6}\.tar)");
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(out, ec)) {
    if (std::regex_match(e.path().filename().string(), pattern)) fs::remove(e.path(), ec);
  }
}

int thread_count(int requested) { return requested > 0 ? requested : omp_get_num_procs(); }

// Reads, validates (decodes) and shards one split of files, in batches so
// memory stays bounded by a batch whatever the dataset's size.
ImageSplitResult write_folder_split(const std::string& name, std::vector<FileItem> items,
                                    size_t num_classes, const ImagePrepareOptions& o,
                                    Stats* stats, std::vector<std::string>* skipped) {
  shuffle_items(items, o.seed, name);
  if (o.limit > 0 && static_cast<int64_t>(items.size()) > o.limit)
    items.resize(static_cast<size_t>(o.limit));
  ImageSplitResult r;
  r.name = name;
  r.per_class.assign(num_classes, 0);
  ImageShardWriter writer(o.out_dir, name, o.shard_samples);
  const int threads = thread_count(o.threads);
  const size_t batch = 512;
  struct Loaded {
    std::vector<uint8_t> bytes;
    ImageFormat format = ImageFormat::Unknown;
    int w = 0, h = 0, c = 0;
    PixelSums sums;
    std::string error;
  };
  const bool collect = name == "train";
  std::vector<Loaded> loaded(batch);
  for (size_t start = 0; start < items.size(); start += batch) {
    const size_t n = std::min(batch, items.size() - start);
#pragma omp parallel for num_threads(threads) schedule(dynamic, 4)
    for (int64_t k = 0; k < static_cast<int64_t>(n); ++k) {
      Loaded& l = loaded[static_cast<size_t>(k)];
      l = Loaded{};
      const std::string& path = items[start + static_cast<size_t>(k)].path;
      try {
        l.bytes = read_file_bytes(path);
        const DecodedImage img = decode_image(l.bytes, path, ColorMode::KeepGray);
        l.format = img.format;
        l.w = img.width, l.h = img.height, l.c = img.channels;
        if (collect) l.sums.add(img);
      } catch (const std::exception& e) {
        l.error = e.what();
      }
    }
    for (size_t k = 0; k < n; ++k) {
      Loaded& l = loaded[k];
      if (!l.error.empty()) {
        if (!o.skip_corrupt)
          fail("{} (use --on-corrupt skip to leave corrupt images out)", l.error);
        skipped->push_back(l.error);
        continue;
      }
      const int64_t label = items[start + k].label;
      writer.add(image_format_extension(l.format), l.bytes, label);
      stats->add(l.w, l.h, l.c);
      if (collect) stats->train.add(l.sums);  // in order: the same sums on any thread count
      ++r.per_class[static_cast<size_t>(label)];
      r.bytes += static_cast<int64_t>(l.bytes.size());
      std::vector<uint8_t>().swap(l.bytes);
    }
  }
  r.samples = writer.samples();
  r.shards = writer.finish();
  if (r.samples == 0) fail("split '{}' has no usable image (all {} skipped)", name, items.size());
  return r;
}

std::string find_idx(const fs::path& dir, const std::string& stem) {
  for (const std::string& cand : {stem + ".gz", stem}) {
    const fs::path p = dir / cand;
    if (fs::is_regular_file(p)) return p.string();
  }
  return {};
}

ImageSplitResult write_idx_split(const std::string& name, const IdxDataset& ds,
                                 const ImagePrepareOptions& o, size_t num_classes, Stats* stats) {
  std::vector<int64_t> order(static_cast<size_t>(ds.images.count));
  std::iota(order.begin(), order.end(), 0);
  shuffle_items(order, o.seed, name);
  if (o.limit > 0 && static_cast<int64_t>(order.size()) > o.limit)
    order.resize(static_cast<size_t>(o.limit));
  ImageSplitResult r;
  r.name = name;
  r.per_class.assign(num_classes, 0);
  ImageShardWriter writer(o.out_dir, name, o.shard_samples);
  const int threads = thread_count(o.threads);
  const size_t batch = 4096;
  std::vector<std::vector<uint8_t>> png(batch);
  const size_t image_bytes = static_cast<size_t>(ds.images.rows) * ds.images.cols;
  for (size_t start = 0; start < order.size(); start += batch) {
    const size_t n = std::min(batch, order.size() - start);
    std::string error;
#pragma omp parallel for num_threads(threads) schedule(dynamic, 64)
    for (int64_t k = 0; k < static_cast<int64_t>(n); ++k) {
      try {
        const uint8_t* px = ds.images.image(order[start + static_cast<size_t>(k)]);
        png[static_cast<size_t>(k)] = encode_png(std::span<const uint8_t>(px, image_bytes),
                                                 ds.images.cols, ds.images.rows, 1);
      } catch (const std::exception& e) {
#pragma omp critical
        error = e.what();
      }
    }
    if (!error.empty()) fail("{}", error);
    for (size_t k = 0; k < n; ++k) {
      const int64_t label = ds.labels[static_cast<size_t>(order[start + k])];
      writer.add("png", png[k], label);
      ++r.per_class[static_cast<size_t>(label)];
      r.bytes += static_cast<int64_t>(png[k].size());
    }
  }
  stats->add(ds.images.cols, ds.images.rows, 1);
  if (name == "train") {
    for (const int64_t i : order) {
      DecodedImage img;
      img.width = ds.images.cols, img.height = ds.images.rows, img.channels = 1;
      img.pixels.assign(ds.images.image(i), ds.images.image(i) + image_bytes);
      stats->train.add(img);
    }
  }
  r.samples = writer.samples();
  r.shards = writer.finish();
  return r;
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

void write_meta(const ImagePrepareResult& r, const ImagePrepareOptions& o) {
  nlohmann::json j;
  j["format"] = "webdataset";
  j["source"] = r.source;
  j["input"] = r.source == "idx" ? o.idx_dir : o.folder;
  j["classes"] = r.classes;
  j["num_classes"] = r.classes.size();
  j["channels"] = r.channels;
  if (r.width > 0)
    j["image_size"] = {r.height, r.width};  // [height, width]
  else
    j["image_size"] = nullptr;
  j["image_extensions"] = r.source == "idx" ? std::vector<std::string>{"png"}
                                            : std::vector<std::string>{"jpg", "png"};
  j["label_extension"] = "cls";
  // Per-channel mean and standard deviation of pixel / 255 over the training
  // split (the training-time reader normalizes with them).
  if (!r.mean.empty()) {
    j["mean"] = r.mean;
    j["std"] = r.std;
  }
  j["seed"] = o.seed;
  j["shard_samples"] = o.shard_samples;
  nlohmann::json splits = nlohmann::json::object();
  for (const ImageSplitResult& s : r.splits) {
    std::vector<std::string> names;
    for (const std::string& p : s.shards) names.push_back(fs::path(p).filename().string());
    splits[s.name] = {{"samples", s.samples}, {"shards", names}, {"per_class", s.per_class},
                      {"image_bytes", s.bytes}};
  }
  j["splits"] = splits;
  j["skipped"] = r.skipped.size();
  const std::string path = (fs::path(o.out_dir) / "meta.json").string();
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    if (!out) fail("cannot create '{}': {}", tmp, errno_str());
    out << j.dump(2) << "\n";
    if (!out) fail("cannot write '{}'", tmp);
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) fail("cannot rename '{}' to '{}': {}", tmp, path, ec.message());
}

}  // namespace

const std::vector<std::string>& fashion_mnist_classes() {
  static const std::vector<std::string> names = {"T-shirt/top", "Trouser", "Pullover", "Dress",
                                                 "Coat",        "Sandal",  "Shirt",    "Sneaker",
                                                 "Bag",         "Ankle boot"};
  return names;
}

ImagePrepareResult prepare_images(const ImagePrepareOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  MT_CHECK(o.folder.empty() != o.idx_dir.empty(),
           "give exactly one input: --folder DIR (an image-folder tree) or --idx-dir DIR");
  MT_CHECK(!o.out_dir.empty(), "no output folder given: pass --out DIR");
  MT_CHECK(o.val_fraction >= 0.0 && o.val_fraction < 1.0, "--val-fraction must be in [0, 1), got {}",
           o.val_fraction);
  MT_CHECK(o.shard_samples >= 1, "--shard-samples must be >= 1, got {}", o.shard_samples);
  ImagePrepareResult r;
  Stats stats;
  const std::string input = o.folder.empty() ? o.idx_dir : o.folder;
  if (!fs::exists(input)) fail("'{}' does not exist", input);
  if (!fs::is_directory(input)) fail("'{}' is not a folder", input);
  std::error_code ec;
  fs::create_directories(o.out_dir, ec);
  if (ec) fail("cannot create output folder '{}': {}", o.out_dir, ec.message());
  remove_stale_shards(o.out_dir);

  if (!o.folder.empty()) {
    r.source = "folder";
    const fs::path root(o.folder);
    const bool presplit = fs::is_directory(root / "train") && fs::is_directory(root / "val");
    if (presplit) {
      r.classes = class_folders(root / "train");
      const std::vector<std::string> val_classes = class_folders(root / "val");
      if (r.classes.empty()) fail("'{}' holds no class folders", (root / "train").string());
      if (val_classes != r.classes)
        fail("'{}' and '{}' must hold the same class folders ({} vs {} classes): the class "
             "index is the position in the sorted list", (root / "train").string(),
             (root / "val").string(), r.classes.size(), val_classes.size());
      std::vector<FileItem> train =
          collect_class_files(root / "train", r.classes, &r.ignored_files);
      std::vector<FileItem> val = collect_class_files(root / "val", r.classes, &r.ignored_files);
      r.splits.push_back(write_folder_split("train", std::move(train), r.classes.size(), o,
                                            &stats, &r.skipped));
      r.splits.push_back(
          write_folder_split("val", std::move(val), r.classes.size(), o, &stats, &r.skipped));
    } else {
      r.classes = class_folders(root);
      if (r.classes.empty())
        fail("'{}' holds no class folders (expected DIR/<class>/<image>, as torchvision's "
             "ImageFolder reads)", o.folder);
      std::vector<FileItem> all = collect_class_files(root, r.classes, &r.ignored_files);
      const std::vector<bool> is_val =
          choose_val_chunks(static_cast<int64_t>(all.size()), o.val_fraction, o.seed);
      std::vector<FileItem> train, val;
      for (size_t i = 0; i < all.size(); ++i) (is_val[i] ? val : train).push_back(all[i]);
      r.splits.push_back(write_folder_split("train", std::move(train), r.classes.size(), o,
                                            &stats, &r.skipped));
      if (!val.empty())
        r.splits.push_back(write_folder_split("val", std::move(val), r.classes.size(), o, &stats,
                                              &r.skipped));
    }
  } else {
    r.source = "idx";
    const fs::path dir(o.idx_dir);
    struct Pair {
      std::string split, images, labels;
    };
    std::vector<Pair> pairs;
    for (const auto& [prefix, split] :
         std::vector<std::pair<std::string, std::string>>{{"train", "train"}, {"t10k", "test"}}) {
      const std::string images = find_idx(dir, prefix + "-images-idx3-ubyte");
      const std::string labels = find_idx(dir, prefix + "-labels-idx1-ubyte");
      if (images.empty() && labels.empty()) continue;
      if (images.empty() || labels.empty())
        fail("'{}': {} without {} (both {}-images-idx3-ubyte[.gz] and "
             "{}-labels-idx1-ubyte[.gz] are needed)", o.idx_dir,
             images.empty() ? labels : images, images.empty() ? "its images" : "its labels",
             prefix, prefix);
      pairs.push_back({split, images, labels});
    }
    if (pairs.empty())
      fail("'{}' holds no IDX files (train-images-idx3-ubyte[.gz], train-labels-idx1-ubyte[.gz], "
           "t10k-...)", o.idx_dir);
    std::vector<IdxDataset> sets;
    int max_label = -1;
    for (const Pair& p : pairs) {
      sets.push_back(read_idx_dataset(p.images, p.labels));
      for (uint8_t l : sets.back().labels) max_label = std::max<int>(max_label, l);
      if (sets.size() > 1 && (sets.back().images.rows != sets.front().images.rows ||
                              sets.back().images.cols != sets.front().images.cols))
        fail("{} holds {}x{} images but {} holds {}x{}", p.images, sets.back().images.rows,
             sets.back().images.cols, pairs.front().images, sets.front().images.rows,
             sets.front().images.cols);
    }
    const size_t num_classes = static_cast<size_t>(max_label + 1);
    const bool fashion =
        num_classes == 10 && lower(fs::absolute(dir).string()).find("fashion") != std::string::npos;
    for (size_t c = 0; c < num_classes; ++c)
      r.classes.push_back(fashion ? fashion_mnist_classes()[c] : std::to_string(c));
    for (size_t i = 0; i < pairs.size(); ++i)
      r.splits.push_back(write_idx_split(pairs[i].split, sets[i], o, num_classes, &stats));
  }
  r.width = stats.width > 0 ? stats.width : 0;
  r.height = stats.height > 0 ? stats.height : 0;
  r.channels = stats.all_gray ? 1 : 3;
  if (stats.train.pixels > 0) {
    const double n = static_cast<double>(stats.train.pixels);
    for (int c = 0; c < r.channels; ++c) {
      const double mean = stats.train.sum[c] / n;
      r.mean.push_back(mean);
      r.std.push_back(std::sqrt(std::max(0.0, stats.train.sq[c] / n - mean * mean)));
    }
  }
  write_meta(r, o);
  r.meta_path = (fs::path(o.out_dir) / "meta.json").string();
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace meshtrain::data
