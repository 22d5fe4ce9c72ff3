// Batches of images from WebDataset shards (data/image_shards.h, written by
// `meshtrain data prepare-images`): data.train = "DIR/train-*.tar".
//
// Order: the samples of every shard matching the pattern (shards in name
// order, samples in file order) are indexed once; each epoch visits them in
// a seeded permutation (the token loader's epoch_permutation), global batch
// k takes entries [k G, (k+1) G) with G = batch x ranks and rank r its slice,
// so one rank with batch N b sees what N ranks with b see together; the
// tail of an epoch is dropped. Evaluation visits epoch 0's order every pass.
// Each image is decoded and augmented (data/image_augment.h: training
// crops and flips, the evaluation view otherwise) with a seed made of the
// run's seed, the epoch and the sample's index: the same view on any rank
// count and after a resume. Normalization uses meta.json's "mean" and "std"
// beside the shards when present, else 0.5 and 0.5.
// A background thread prepares batches ahead (prefetch), decoding each
// batch's images on `options.workers` threads of its own.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "meshtrain/data/batch_source.h"
#include "meshtrain/data/image_augment.h"
#include "meshtrain/data/image_shards.h"
#include "meshtrain/data/prefetcher.h"

namespace meshtrain::data {

class ImageSource final : public BatchSource {
 public:
  // options.sample_shape is (C, H, W) with H = W; throws naming the pattern
  // when it matches no shard or the data holds less than one global batch.
  explicit ImageSource(LoaderOptions options);
  ~ImageSource() override;
  Batch next() override;
  LoaderPosition position() const override { return position_; }
  void seek(LoaderPosition position) override;
  int64_t batches_per_epoch() const override { return batches_per_epoch_; }
  std::string describe() const override;
  int64_t num_samples() const { return static_cast<int64_t>(samples_.size()); }

 private:
  struct Sample {
    int shard = 0;
    std::span<const uint8_t> image;
    int32_t label = 0;
  };
  Batch make_batch(int64_t sequence_index);
  const std::vector<int64_t>& permutation(int64_t epoch);

  LoaderOptions options_;
  AugmentOptions augment_;
  std::vector<std::unique_ptr<ImageShardReader>> shards_;  // keep the mappings
  std::vector<std::string> shard_paths_;
  std::vector<Sample> samples_;
  int64_t batches_per_epoch_ = 0;
  LoaderPosition position_;
  int64_t cached_epoch_ = -1;
  std::vector<int64_t> cached_permutation_;
  std::unique_ptr<Prefetcher<Batch>> prefetcher_;
};

// True when `pattern` names image shards (ends in .tar).
bool is_image_shard_pattern(const std::string& pattern);

}  // namespace meshtrain::data
