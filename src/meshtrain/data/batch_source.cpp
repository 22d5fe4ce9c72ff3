#include "meshtrain/data/batch_source.h"

#include "meshtrain/data/data_loader.h"

namespace meshtrain::data {

// Token shards are the only kind of training files today; a source for
// another kind (image shards) is chosen here by what the pattern names.
std::unique_ptr<BatchSource> open_batch_source(const LoaderOptions& options) {
  return std::make_unique<DataLoader>(options);
}

}  // namespace meshtrain::data
