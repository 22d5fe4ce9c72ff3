// The runs of a flat parameter buffer an optimizer treats alike: which
// parameters get weight decay (and, for LARS and LAMB, a trust ratio), which
// are model state it leaves alone, and which tensor each run is.
#pragma once
#include <cstdint>
#include <vector>

namespace meshtrain {

struct ParamLayout;

// A contiguous run of the flat buffer with one setting. `tensor` is the
// layout's parameter index when a segment is exactly one tensor (what
// per-layer norms need), -1 for a merged run.
struct ParamSegment {
  int64_t begin = 0, end = 0;
  // Weight decay applies; for LARS and LAMB also the trust ratio (norms and
  // biases are excluded from both by default).
  bool decay = true;
  bool trained = true;  // false: model state the optimizer leaves alone (ParamInfo::trained)
  int tensor = -1;
};

// Decay segments from the layout: decay on matrices and embeddings
// (ParamInfo::decay), none on biases and norms; adjacent runs merged.
std::vector<ParamSegment> param_segments(const ParamLayout& layout);
// One segment per parameter tensor, in layout order (not merged).
std::vector<ParamSegment> tensor_segments(const ParamLayout& layout);
// The segments clipped to [begin, end), empty ones dropped.
std::vector<ParamSegment> clip_segments(const std::vector<ParamSegment>& segments, int64_t begin,
                                        int64_t end);

}  // namespace meshtrain
