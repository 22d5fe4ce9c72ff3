// Where training and evaluation batches come from, whatever a sample is:
// the trainer and the evaluation see only this interface. A source yields
// global batch after global batch of one epoch order (every rank its slice),
// can report and seek its position (checkpoints save it), and is opened by
// open_batch_source from what the files are.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "meshtrain/core/tensor.h"

namespace meshtrain::data {

enum class LoaderMode { Train, Eval };

struct LoaderPosition {
  int64_t epoch = 0;
  int64_t batch = 0;  // global batch index within the epoch
  bool operator==(const LoaderPosition&) const = default;
};

struct LoaderOptions {
  std::string pattern;    // shard glob, e.g. "data/fortunes/train_*.bin"
  int64_t batch = 8;      // B: samples (windows) per rank per batch
  int64_t seq_len = 256;  // T: a token window's length (token data)
  int rank = 0;
  int world_size = 1;
  uint64_t seed = 1;
  LoaderMode mode = LoaderMode::Train;
  int prefetch = 2;       // batches prepared ahead; 0 = no thread
  int workers = 2;        // threads decoding a batch's images (image shards)
  LoaderPosition start;   // where to begin (a saved position())
  // What one sample is for a model of dense samples (ModelSpec::Input::Dense):
  // its shape (C, H, W for images) and the number of classes; empty for
  // token models.
  std::vector<int64_t> sample_shape;
  int classes = 0;
};

// A batch of B samples: token windows (inputs (B, T) int32, targets (B, T)
// int32: the inputs shifted left by one, -1 where not trained on) or dense
// samples (inputs (B, ...) f32, targets (B) int32 class labels).
struct Batch {
  Tensor inputs;
  Tensor targets;
  LoaderPosition position;  // of this batch
};

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  virtual Batch next() = 0;
  // The position of the batch next() returns next.
  virtual LoaderPosition position() const = 0;
  virtual void seek(LoaderPosition position) = 0;
  void rewind() { seek({}); }
  virtual int64_t batches_per_epoch() const = 0;
  // Some targets are -1 (instruction data's prompts): losses are means over
  // the counted targets, so averages weight batches by their counts.
  virtual bool masked() const { return false; }
  // For the run's log: "12345 windows in data/x/train_*.bin".
  virtual std::string describe() const = 0;
};

// Opens the source for `options.pattern`: token shards (a glob of .bin
// files), or "synthetic" / "synthetic:N" (dense samples made from their
// index, N per epoch: data/synthetic_images.h); throws meshtrain::Error
// naming the pattern when nothing can read it for this kind of model.
std::unique_ptr<BatchSource> open_batch_source(const LoaderOptions& options);

}  // namespace meshtrain::data
