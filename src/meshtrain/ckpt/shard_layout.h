// Which part of a flat buffer each rank writes: equal contiguous ranges
// [r*ceil(P/W), min(P, (r+1)*ceil(P/W))), so all ranks write in parallel and
// a reader of any world size finds an element by one division.
#pragma once
#include <cstdint>
#include <string>

namespace meshtrain::ckpt {

struct ElemRange {
  int64_t begin = 0, end = 0;
  int64_t count() const { return end > begin ? end - begin : 0; }
  bool operator==(const ElemRange&) const = default;
};

// Rank r's range of a buffer of `numel` elements split over `world` ranks
// (empty ranges for trailing ranks when numel < world).
ElemRange shard_range(int64_t numel, int world, int rank);

// The overlap of two ranges (count() == 0 when they do not meet).
ElemRange intersect(ElemRange a, ElemRange b);

// The file rank r of W writes: shard_<r>_of_<W>.safetensors.
std::string shard_file_name(int rank, int world);

}  // namespace meshtrain::ckpt
