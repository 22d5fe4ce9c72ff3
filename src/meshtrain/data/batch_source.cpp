#include "meshtrain/data/batch_source.h"

#include "meshtrain/core/error.h"
#include "meshtrain/data/data_loader.h"
#include "meshtrain/data/image_source.h"
#include "meshtrain/data/synthetic_images.h"

namespace meshtrain::data {

std::unique_ptr<BatchSource> open_batch_source(const LoaderOptions& options) {
  const int64_t synthetic = synthetic_samples(
      options.pattern, options.mode == LoaderMode::Eval ? 2048 : 50000);
  if (synthetic >= 0) return std::make_unique<SyntheticImages>(options, synthetic);
  if (is_image_shard_pattern(options.pattern)) {
    MT_CHECK(!options.sample_shape.empty(), "data \"{}\" names image shards; this model reads "
             "tokens", options.pattern);
    return std::make_unique<ImageSource>(options);
  }
  MT_CHECK(options.sample_shape.empty(), "data \"{}\": this model reads dense samples (images): "
           "give image shards (\"DIR/train-*.tar\", from `meshtrain data prepare-images`) or "
           "\"synthetic\"", options.pattern);
  return std::make_unique<DataLoader>(options);
}

}  // namespace meshtrain::data
