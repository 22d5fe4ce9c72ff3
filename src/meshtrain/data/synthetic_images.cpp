#include "meshtrain/data/synthetic_images.h"

#include <fmt/format.h>

#include <cmath>

#include "meshtrain/core/error.h"
#include "meshtrain/core/rng.h"

namespace meshtrain::data {

SyntheticImages::SyntheticImages(LoaderOptions options, int64_t samples)
    : options_(std::move(options)), samples_(samples) {
  MT_CHECK(!options_.sample_shape.empty() && options_.classes >= 2, "synthetic data is for models "
           "of dense samples (images); this model reads {}",
           options_.sample_shape.empty() ? "tokens" : "fewer than 2 classes");
  for (int64_t d : options_.sample_shape) sample_numel_ *= d;
  const int64_t G = options_.batch * options_.world_size;
  MT_CHECK(options_.batch >= 1 && samples_ >= G, "synthetic:{} holds fewer samples than one global "
           "batch of {} x {} ranks", samples_, options_.batch, options_.world_size);
  batches_per_epoch_ = samples_ / G;
  stream_ = options_.seed * 0x9E3779B97F4A7C15ull + (options_.mode == LoaderMode::Eval ? 1 : 2);
  seek(options_.start);
}

SyntheticImages::~SyntheticImages() = default;

void SyntheticImages::seek(LoaderPosition p) {
  position_ = p;
  prefetcher_.reset();
  prefetcher_ = std::make_unique<Prefetcher<Batch>>(
      [this](int64_t i) { return make_batch(i); }, p.epoch * batches_per_epoch_ + p.batch, options_.prefetch);
}

int32_t SyntheticImages::label(int64_t index) const {
  Rng rng(stream_ ^ (static_cast<uint64_t>(index) * 0xD1B54A32D192ED03ull));
  return static_cast<int32_t>(rng.next_u64() % static_cast<uint64_t>(options_.classes));
}

// Noise plus sin(0.9 label + 0.37 h + 0.23 w + 1.1 c) over a (C, H, W)
// sample (a flat one counts as C = 1, H = 1).
void SyntheticImages::fill(int64_t index, float* out) const {
  const int32_t y = label(index);
  Rng rng(stream_ + 7 * static_cast<uint64_t>(index));
  const int64_t W = options_.sample_shape.back();
  const int64_t H = options_.sample_shape.size() >= 2 ? options_.sample_shape[options_.sample_shape.size() - 2] : 1;
  for (int64_t j = 0; j < sample_numel_; ++j) {
    const int64_t w = j % W, h = (j / W) % H, c = j / (W * H);
    out[j] = 0.5f * rng.normal() +
             static_cast<float>(std::sin(0.9 * y + 0.37 * h + 0.23 * w + 1.1 * c));
  }
}

Batch SyntheticImages::make_batch(int64_t sequence_index) const {
  const int64_t B = options_.batch, G = B * options_.world_size;
  const LoaderPosition pos{sequence_index / batches_per_epoch_, sequence_index % batches_per_epoch_};
  Shape shape{B};
  for (int64_t d : options_.sample_shape) shape.push_back(d);
  Batch b{Tensor::zeros(shape, DType::F32, MemCategory::Data), Tensor::zeros({B}, DType::I32, MemCategory::Data),
          pos};
  for (int64_t i = 0; i < B; ++i) {
    const int64_t index = pos.batch * G + options_.rank * B + i;
    fill(index, b.inputs.data<float>() + i * sample_numel_);
    b.targets.data<int32_t>()[i] = label(index);
  }
  return b;
}

Batch SyntheticImages::next() {
  Batch b = prefetcher_->next();
  position_ = {b.position.epoch, b.position.batch + 1};
  if (position_.batch == batches_per_epoch_) position_ = {position_.epoch + 1, 0};
  return b;
}

std::string SyntheticImages::describe() const {
  return fmt::format("{} synthetic samples of {} in {} classes", samples_,
                     fmt::join(options_.sample_shape, "x"), options_.classes);
}

int64_t synthetic_samples(const std::string& pattern, int64_t default_samples) {
  if (pattern == "synthetic") return default_samples;
  if (pattern.rfind("synthetic:", 0) != 0) return -1;
  const std::string n = pattern.substr(10);
  MT_CHECK(!n.empty() && n.find_first_not_of("0123456789") == std::string::npos && n.size() < 12,
           "\"{}\": expected synthetic:N with N a count of samples", pattern);
  return std::stoll(n);
}

}  // namespace meshtrain::data
