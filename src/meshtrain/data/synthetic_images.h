// Dense samples made from their index, for throughput benchmarks and tests
// that need no files (data.train = "synthetic" or "synthetic:N"): sample i
// of a split has a class drawn from (seed, split, i) and values that are
// noise plus a smooth pattern of its class, so a model can learn them. The
// training and evaluation splits draw from different streams. The order is
// the index order in every epoch; global batch k holds samples [k G, (k+1) G)
// with G = batch x world size, rank r its slice, as the token loader.
// Batches are made ahead on a background thread (options.prefetch), so
// making them is not part of the step.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "meshtrain/data/batch_source.h"
#include "meshtrain/data/prefetcher.h"

namespace meshtrain::data {

class SyntheticImages final : public BatchSource {
 public:
  // `samples` per epoch; options.sample_shape and classes say what a sample is.
  SyntheticImages(LoaderOptions options, int64_t samples);
  ~SyntheticImages() override;
  Batch next() override;
  LoaderPosition position() const override { return position_; }
  void seek(LoaderPosition position) override;
  int64_t batches_per_epoch() const override { return batches_per_epoch_; }
  std::string describe() const override;

  // The values and the label of sample `index` (tests check a batch's rows).
  int32_t label(int64_t index) const;
  void fill(int64_t index, float* out) const;

 private:
  LoaderOptions options_;
  int64_t samples_, sample_numel_ = 1, batches_per_epoch_ = 0;
  uint64_t stream_ = 0;  // the split's
  LoaderPosition position_;
  std::unique_ptr<Prefetcher<Batch>> prefetcher_;

  Batch make_batch(int64_t sequence_index) const;
};

// "synthetic" -> default_samples, "synthetic:N" -> N; -1 when `pattern` is
// not a synthetic source. Throws for a malformed count.
int64_t synthetic_samples(const std::string& pattern, int64_t default_samples);

}  // namespace meshtrain::data
