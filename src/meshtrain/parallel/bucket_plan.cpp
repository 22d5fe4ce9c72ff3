#include "meshtrain/parallel/bucket_plan.h"

#include <algorithm>

#include "meshtrain/core/error.h"

namespace meshtrain::parallel {

std::vector<Bucket> plan_buckets(int64_t total, int64_t first_cap, int64_t cap) {
  MT_CHECK(total >= 0 && first_cap >= 1 && cap >= 1,
           "bucket plan needs total >= 0 and caps >= 1 (got {}, {}, {})", total, first_cap, cap);
  std::vector<Bucket> out;
  int64_t end = total;
  while (end > 0) {
    const int64_t size = std::min(end, out.empty() ? first_cap : cap);
    out.push_back({end - size, end});
    end -= size;
  }
  return out;
}

std::vector<Bucket> plan_buckets_on(const std::vector<int64_t>& cuts, int64_t total,
                                    int64_t first_cap, int64_t cap) {
  MT_CHECK(total >= 0 && first_cap >= 1 && cap >= 1,
           "bucket plan needs total >= 0 and caps >= 1 (got {}, {}, {})", total, first_cap, cap);
  MT_CHECK(std::is_sorted(cuts.begin(), cuts.end()), "bucket cuts must be sorted");
  std::vector<Bucket> out;
  int64_t end = total;
  while (end > 0) {
    const int64_t lowest = end - (out.empty() ? first_cap : cap);
    // The first cut at or above `lowest` below `end`; none: the cut below it.
    auto it = std::lower_bound(cuts.begin(), cuts.end(), std::max<int64_t>(lowest, 1));
    int64_t begin = it != cuts.end() && *it < end ? *it : -1;
    if (begin < 0) {
      auto below = std::lower_bound(cuts.begin(), cuts.end(), end);
      begin = below == cuts.begin() ? 0 : *std::prev(below);
    }
    if (lowest <= 0) begin = 0;
    out.push_back({begin, end});
    end = begin;
  }
  return out;
}

}  // namespace meshtrain::parallel
