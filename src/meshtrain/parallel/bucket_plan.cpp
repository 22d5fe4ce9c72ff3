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

}  // namespace meshtrain::parallel
