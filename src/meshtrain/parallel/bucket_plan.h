// Gradient buckets: contiguous ranges of the flat gradient buffer, planned in
// the order backward finishes them (top of the buffer first: ln_f, the last
// layer, ..., the embeddings at offset 0). The first bucket is kept small so
// communication starts early (as PyTorch DDP does); the rest are `cap` large.
#pragma once
#include <cstdint>
#include <vector>

namespace meshtrain::parallel {

struct Bucket {
  int64_t begin = 0, end = 0;  // elements [begin, end) of the flat buffer
  int64_t count() const { return end - begin; }
};

// Buckets covering [0, total) from the top down; caps are in elements (>= 1).
// Bucket i+1 ends where bucket i begins, so the list is in launch order.
std::vector<Bucket> plan_buckets(int64_t total, int64_t first_cap, int64_t cap);

// The same, but every bucket begins at one of `cuts` (sorted offsets where
// tensors begin; 0 is implied): a bucket ends at the last cut that keeps it
// within its cap, or holds one whole tensor larger than the cap.
std::vector<Bucket> plan_buckets_on(const std::vector<int64_t>& cuts, int64_t total,
                                    int64_t first_cap, int64_t cap);

}  // namespace meshtrain::parallel
