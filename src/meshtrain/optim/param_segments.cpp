#include "meshtrain/optim/param_segments.h"

#include <algorithm>

#include "meshtrain/nn/model.h"

namespace meshtrain {

std::vector<ParamSegment> tensor_segments(const ParamLayout& layout) {
  std::vector<ParamSegment> segs;
  for (size_t i = 0; i < layout.params.size(); ++i) {
    const ParamInfo& p = layout.params[i];
    segs.push_back({p.begin, p.end(), p.decay, p.trained, static_cast<int>(i)});
  }
  return segs;
}

std::vector<ParamSegment> param_segments(const ParamLayout& layout) {
  std::vector<ParamSegment> segs;
  for (ParamSegment s : tensor_segments(layout)) {
    s.tensor = -1;
    // Merge with the previous run when the settings agree.
    if (!segs.empty() && segs.back().end == s.begin && segs.back().decay == s.decay &&
        segs.back().trained == s.trained)
      segs.back().end = s.end;
    else
      segs.push_back(s);
  }
  return segs;
}

std::vector<ParamSegment> clip_segments(const std::vector<ParamSegment>& segments, int64_t begin,
                                        int64_t end) {
  std::vector<ParamSegment> out;
  for (ParamSegment s : segments) {
    s.begin = std::max(s.begin, begin);
    s.end = std::min(s.end, end);
    if (s.end > s.begin) out.push_back(s);
  }
  return out;
}

}  // namespace meshtrain
