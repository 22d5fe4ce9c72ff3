// Gradient reduction overlaps backward. With a deliberately slow transport
// (MESHTRAIN_COMM_TEST_DELAY_US sleeps before every allreduce on the progress
// thread), the time a step waits for its buckets after backward (exposed) must
// be smaller than the time the bucket allreduces took in total, the first
// bucket must be launched before the last backward ends, and most of the
// backward left after that launch must have communication hidden behind it.
#include <algorithm>

#include "dp_harness.h"

using namespace dp_test;

namespace {
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
}  // namespace

TEST(dp, communication_overlaps_backward) {
  // char-2L in 64 KiB buckets: layer 1's buckets are reduced while layer 0's
  // backward runs; only the embeddings' buckets can be fully exposed.
  const std::string data = (workdir() / "data").string();
  RunResult r = train("overlap",
                      " --nproc 2 --set model.preset=char-2L --set data.train='" + data +
                          "/train_*.bin' --set train.steps=6 --set train.micro_batch=4"
                          " --set train.threads=1 --set train.eval_every=0"
                          " --set parallel.first_bucket_mb=0.0625 --set parallel.bucket_mb=0.0625",
                      "env MESHTRAIN_COMM_TEST_DELAY_US=2000");
  ASSERT_EQ(r.status, 0) << r.log;
  const auto rows = r.metrics();
  ASSERT_EQ(rows.size(), 6u);
  std::vector<double> exposed, total, hidden, window;
  for (size_t i = 1; i < rows.size(); ++i) {  // step 1 warms up
    const auto& m = rows[i];
    ASSERT_TRUE(m.contains("comm_total_ms")) << m.dump();
    EXPECT_GT(m["comm_buckets"].get<int>(), 20);
    // Launched during backward, not after it.
    EXPECT_LT(m["comm_first_launch_ms"].get<double>(), m["last_backward_ms"].get<double>()) << m.dump();
    const double e = m["comm_exposed_ms"], t = m["comm_total_ms"];
    // Every bucket sleeps 2 ms, so the total cannot be less than that.
    EXPECT_GE(t, 2.0 * m["comm_buckets"].get<int>()) << m.dump();
    exposed.push_back(e);
    total.push_back(t);
    hidden.push_back(t - e);
    // Communication can hide only behind the backward that is left once the
    // first bucket is launched.
    window.push_back(m["last_backward_ms"].get<double>() - m["comm_first_launch_ms"].get<double>());
  }
  EXPECT_LT(median(exposed), median(total));
  // The progress engine is busy from the first launch on (every bucket sleeps
  // 2 ms), so most of that window is hidden communication. Measured against
  // the window, not the total: a faster CPU shortens backward, not the sleeps.
  EXPECT_GT(median(hidden), 0.5 * median(window))
      << "hidden " << median(hidden) << " ms (exposed " << median(exposed) << " of " << median(total)
      << " ms) behind a backward window of " << median(window) << " ms";
}
