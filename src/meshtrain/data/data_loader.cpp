#include "meshtrain/data/data_loader.h"

#include <fmt/format.h>

#include <numeric>

#include "meshtrain/core/error.h"
#include "meshtrain/core/rng.h"

namespace meshtrain::data {

std::vector<int64_t> epoch_permutation(int64_t num_windows, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> perm(static_cast<size_t>(num_windows));
  std::iota(perm.begin(), perm.end(), 0);
  // Mix the epoch into the seed (a plain seed + epoch would make seed 1 epoch 1
  // replay seed 2 epoch 0).
  Rng rng(seed ^ (0x9e3779b97f4a7c15ull * static_cast<uint64_t>(epoch + 1)));
  for (int64_t i = num_windows - 1; i > 0; --i) {  // Fisher-Yates
    const int64_t j = static_cast<int64_t>(rng.below(static_cast<uint64_t>(i + 1)));
    std::swap(perm[i], perm[j]);
  }
  return perm;
}

DataLoader::DataLoader(LoaderOptions options) : options_(std::move(options)) {
  const LoaderOptions& o = options_;
  MT_CHECK(o.batch >= 1, "data loader batch must be >= 1, got {}", o.batch);
  MT_CHECK(o.seq_len >= 1, "data loader seq_len must be >= 1, got {}", o.seq_len);
  MT_CHECK(o.world_size >= 1, "world size must be >= 1, got {}", o.world_size);
  MT_CHECK(o.rank >= 0 && o.rank < o.world_size, "rank {} out of range [0, {})", o.rank,
           o.world_size);
  MT_CHECK(o.prefetch >= 0, "prefetch depth must be >= 0, got {}", o.prefetch);
  shards_ = std::make_shared<const ShardSet>(o.pattern, o.seq_len);
  batches_per_epoch_ = shards_->num_windows() / global_batch();
  if (batches_per_epoch_ == 0)
    fail("'{}' holds {} windows of {} tokens, fewer than one global batch of {} "
         "(world size {} x batch {}); use more data or a smaller batch", o.pattern,
         shards_->num_windows(), o.seq_len + 1, global_batch(), o.world_size, o.batch);
  seek(o.start);
}

DataLoader::~DataLoader() = default;  // the prefetcher joins its thread

LoaderPosition DataLoader::position_of(int64_t s) const {
  return {s / batches_per_epoch_, s % batches_per_epoch_};
}

std::string DataLoader::describe() const {
  return fmt::format("{} windows in {}", num_windows(), options_.pattern);
}

void DataLoader::seek(LoaderPosition p) {
  MT_CHECK(p.epoch >= 0 && p.batch >= 0 && p.batch < batches_per_epoch_,
           "data position (epoch {}, batch {}) is outside [0, {}) batches per epoch of '{}' "
           "(was it saved with another global batch size or data set?)",
           p.epoch, p.batch, batches_per_epoch_, options_.pattern);
  prefetcher_.reset();  // stop the thread before the state it reads changes
  position_ = p;
  prefetcher_ = std::make_unique<Prefetcher<Batch>>(
      [this](int64_t s) { return make_batch(s); }, sequence_index(p), options_.prefetch);
}

Batch DataLoader::next() {
  Batch b = prefetcher_->next();
  position_ = position_of(sequence_index(b.position) + 1);
  return b;
}

const std::vector<int64_t>& DataLoader::permutation(int64_t epoch) {
  const int64_t key = options_.mode == LoaderMode::Eval ? 0 : epoch;
  if (key != cached_epoch_) {
    cached_permutation_ = epoch_permutation(shards_->num_windows(), options_.seed, key);
    cached_epoch_ = key;
  }
  return cached_permutation_;
}

std::vector<int64_t> DataLoader::window_ids(LoaderPosition p) const {
  const int64_t key = options_.mode == LoaderMode::Eval ? 0 : p.epoch;
  const std::vector<int64_t> perm = epoch_permutation(shards_->num_windows(), options_.seed, key);
  const int64_t first = p.batch * global_batch() + options_.rank * options_.batch;
  return {perm.begin() + first, perm.begin() + first + options_.batch};
}

Batch DataLoader::make_batch(int64_t s) {
  const int64_t B = options_.batch, T = options_.seq_len;
  Batch b;
  b.position = position_of(s);
  const std::vector<int64_t>& perm = permutation(b.position.epoch);
  const int64_t first = b.position.batch * global_batch() + options_.rank * B;
  b.inputs = Tensor::zeros({B, T}, DType::I32, MemCategory::Data);
  b.targets = Tensor::zeros({B, T}, DType::I32, MemCategory::Data);
  std::vector<int32_t> window(static_cast<size_t>(T + 1));
  std::vector<uint8_t> mask(shards_->masked() ? static_cast<size_t>(T + 1) : 0);
  int32_t* in = b.inputs.data<int32_t>();
  int32_t* tg = b.targets.data<int32_t>();
  for (int64_t i = 0; i < B; ++i) {
    shards_->read_window(perm[static_cast<size_t>(first + i)], window.data(),
                         mask.empty() ? nullptr : mask.data());
    std::copy(window.begin(), window.end() - 1, in + i * T);
    std::copy(window.begin() + 1, window.end(), tg + i * T);
    // Masked shards: a token not trained on is an ignored target (-1).
    if (!mask.empty())
      for (int64_t j = 0; j < T; ++j)
        if (!mask[static_cast<size_t>(j + 1)]) tg[i * T + j] = -1;
  }
  return b;
}

}  // namespace meshtrain::data
