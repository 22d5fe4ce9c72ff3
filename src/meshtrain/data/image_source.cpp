#include "meshtrain/data/image_source.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <thread>

#include "meshtrain/core/error.h"
#include "meshtrain/data/data_loader.h"
#include "meshtrain/data/shard_set.h"

namespace meshtrain::data {

namespace {

// meta.json's per-channel "mean" and "std" beside the shards, when present.
void read_normalization(const std::string& shard, int channels, AugmentOptions& a) {
  const auto meta = std::filesystem::path(shard).parent_path() / "meta.json";
  std::ifstream in(meta);
  if (!in) return;
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.contains("mean") || !j.contains("std")) return;
  auto m = j["mean"].get<std::vector<float>>(), s = j["std"].get<std::vector<float>>();
  if (static_cast<int>(m.size()) == channels && static_cast<int>(s.size()) == channels) {
    a.mean = m;
    a.std = s;
  }
}

uint64_t view_seed(uint64_t seed, int64_t epoch, int64_t index) {
  return seed * 0x9E3779B97F4A7C15ull ^ (static_cast<uint64_t>(epoch) << 40) ^ static_cast<uint64_t>(index);
}

}  // namespace

bool is_image_shard_pattern(const std::string& pattern) {
  return pattern.size() > 4 && pattern.compare(pattern.size() - 4, 4, ".tar") == 0;
}

ImageSource::ImageSource(LoaderOptions options) : options_(std::move(options)) {
  MT_CHECK(options_.workers >= 1, "image data needs at least one decoding worker, not {}", options_.workers);
  const auto& shape = options_.sample_shape;
  MT_CHECK(shape.size() == 3 && shape[1] == shape[2] && (shape[0] == 1 || shape[0] == 3),
           "image shards feed models of C x S x S images with C = 1 or 3");
  augment_.size = static_cast<int>(shape[1]);
  augment_.channels = static_cast<int>(shape[0]);
  augment_.train = options_.mode == LoaderMode::Train;
  augment_.crop = AugmentOptions::crop_for(augment_.size);
  shard_paths_ = expand_shard_glob(options_.pattern, "image shards",
                                   " (make them with `meshtrain data prepare-images`)");
  read_normalization(shard_paths_[0], augment_.channels, augment_);
  for (size_t s = 0; s < shard_paths_.size(); ++s) {
    shards_.push_back(std::make_unique<ImageShardReader>(shard_paths_[s]));
    ImageSample x;
    while (shards_.back()->next(&x)) {
      MT_CHECK(x.label >= 0 && x.label < options_.classes, "{}: sample {} has class {}, but the "
               "model has {} classes", shard_paths_[s], x.key, x.label, options_.classes);
      samples_.push_back({static_cast<int>(s), x.image, static_cast<int32_t>(x.label)});
    }
  }
  const int64_t G = options_.batch * options_.world_size;
  batches_per_epoch_ = static_cast<int64_t>(samples_.size()) / G;
  MT_CHECK(batches_per_epoch_ >= 1, "data \"{}\" holds {} images, fewer than one global batch of "
           "{} x {} ranks", options_.pattern, samples_.size(), options_.batch, options_.world_size);
  seek(options_.start);
}

ImageSource::~ImageSource() = default;

std::string ImageSource::describe() const {
  return fmt::format("{} images in {} shard(s) {} ({}x{}x{}, {})", samples_.size(), shard_paths_.size(),
                     options_.pattern, augment_.channels, augment_.size, augment_.size,
                     !augment_.train ? "evaluation view"
                     : augment_.crop == AugmentOptions::Crop::PadCrop ? "pad-crop + flip"
                                                                      : "random-resized-crop + flip");
}

const std::vector<int64_t>& ImageSource::permutation(int64_t epoch) {
  const int64_t key = options_.mode == LoaderMode::Eval ? 0 : epoch;
  if (key != cached_epoch_) {
    cached_permutation_ = epoch_permutation(num_samples(), options_.seed, key);
    cached_epoch_ = key;
  }
  return cached_permutation_;
}

Batch ImageSource::make_batch(int64_t sequence_index) {
  const LoaderPosition pos{sequence_index / batches_per_epoch_, sequence_index % batches_per_epoch_};
  const std::vector<int64_t>& perm = permutation(pos.epoch);
  const int64_t B = options_.batch, S = augment_.size, C = augment_.channels;
  Batch b{Tensor::zeros({B, C, S, S}, DType::F32, MemCategory::Data), Tensor::zeros({B}, DType::I32, MemCategory::Data), pos};
  const int64_t first = pos.batch * B * options_.world_size + options_.rank * B;
  const int64_t view_epoch = augment_.train ? pos.epoch : 0;
  auto work = [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t index = perm[static_cast<size_t>(first + i)];
      const Sample& s = samples_[static_cast<size_t>(index)];
      augment_encoded_image(s.image, fmt::format("{} (sample {})", shard_paths_[static_cast<size_t>(s.shard)], index),
                            augment_, view_seed(options_.seed, view_epoch, index), b.inputs.data<float>() + i * C * S * S);
      b.targets.data<int32_t>()[i] = s.label;
    }
  };
  // The batch's images on `options_.workers` threads; the first error is re-thrown.
  const int n = static_cast<int>(std::min<int64_t>(options_.workers, B));
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
  for (int t = 0; t < n; ++t)
    threads.emplace_back([&, t] {
      try {
        work(B * t / n, B * (t + 1) / n);
      } catch (...) {
        errors[static_cast<size_t>(t)] = std::current_exception();
      }
    });
  for (auto& th : threads) th.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  return b;
}

void ImageSource::seek(LoaderPosition p) {
  position_ = p;
  prefetcher_.reset();
  prefetcher_ = std::make_unique<Prefetcher<Batch>>(
      [this](int64_t i) { return make_batch(i); }, p.epoch * batches_per_epoch_ + p.batch,
      options_.prefetch);
}

Batch ImageSource::next() {
  Batch b = prefetcher_->next();
  position_ = {b.position.epoch, b.position.batch + 1};
  if (position_.batch == batches_per_epoch_) position_ = {position_.epoch + 1, 0};
  return b;
}

}  // namespace meshtrain::data
