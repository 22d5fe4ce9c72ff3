// Batches of next-token windows from token shards, for training and eval.
//
// Order. The windows of the shard set (see shard_set.h) are visited in a
// seeded random permutation, a new one each epoch (seed mixed with the epoch).
// Global batch k of an epoch is permutation entries [k*G, (k+1)*G) with
// G = world_size * batch; rank r takes entries [k*G + r*batch, k*G + (r+1)*batch).
// The global sequence of windows depends only on (seed, G), so one rank with
// batch N*b sees exactly the windows N ranks with batch b see together. An
// epoch has floor(windows / G) batches; the tail is dropped so every rank
// makes the same number of steps.
//
// Eval mode visits one fixed permutation (epoch 0's) in every pass: rewind()
// before each evaluation and the same batches come back every time.
//
// Resuming. position() is the (epoch, batch) of the next batch next() will
// return; save it with a checkpoint and pass it to seek() (or to the options)
// to continue with exactly the batches that would have followed.
//
// Prefetching. A background thread prepares up to `prefetch` batches ahead;
// errors it meets are re-thrown by next(); the destructor stops it cleanly.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "meshtrain/core/tensor.h"
#include "meshtrain/data/batch_source.h"
#include "meshtrain/data/prefetcher.h"
#include "meshtrain/data/shard_set.h"

namespace meshtrain::data {

class DataLoader final : public BatchSource {
 public:
  // Opens the shards; throws meshtrain::Error when the pattern matches nothing,
  // the options are out of range, or the data holds less than one global batch.
  explicit DataLoader(LoaderOptions options);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  Batch next() override;
  LoaderPosition position() const override { return position_; }
  void seek(LoaderPosition position) override;
  int64_t batches_per_epoch() const override { return batches_per_epoch_; }
  bool masked() const override { return shards_->masked(); }
  std::string describe() const override;

  const LoaderOptions& options() const { return options_; }
  const ShardSet& shards() const { return *shards_; }
  int64_t global_batch() const { return options_.batch * options_.world_size; }
  int64_t num_windows() const { return shards_->num_windows(); }

  // The window ids of global batch `position` for this rank, in row order.
  std::vector<int64_t> window_ids(LoaderPosition position) const;

 private:
  Batch make_batch(int64_t sequence_index);
  const std::vector<int64_t>& permutation(int64_t epoch);
  int64_t sequence_index(LoaderPosition p) const { return p.epoch * batches_per_epoch_ + p.batch; }
  LoaderPosition position_of(int64_t sequence_index) const;

  LoaderOptions options_;
  std::shared_ptr<const ShardSet> shards_;
  int64_t batches_per_epoch_ = 0;
  LoaderPosition position_;
  // The permutation of the epoch being read; used by the producing thread only.
  int64_t cached_epoch_ = -1;
  std::vector<int64_t> cached_permutation_;
  std::unique_ptr<Prefetcher<Batch>> prefetcher_;
};

// The window visiting order of one epoch (exposed for tests and tools).
std::vector<int64_t> epoch_permutation(int64_t num_windows, uint64_t seed, int64_t epoch);

}  // namespace meshtrain::data
