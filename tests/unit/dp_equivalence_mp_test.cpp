// Data-parallel equivalence, the project's central property: N ranks with
// micro-batch b train exactly what one rank with micro-batch N*b trains (the
// DataLoader gives the N ranks together the windows the one rank sees).
// Tolerance: 1e-5 relative on every step's loss and validation loss, and 5e-5
// on every parameter tensor of the final model (L2 norm of the difference
// over the norm of the reference; why 5x: dp_harness.h; attention key biases,
// which only ever receive rounding noise, are checked to stay noise-sized
// instead). Real processes
// through `meshtrain train --nproc N`.
#include <map>

#include "dp_harness.h"

using namespace dp_test;

namespace {

constexpr int kSteps = 20;
constexpr double kTol = 1e-5;  // why 1e-5, and what it measures: dp_harness.h

// One-rank reference with micro-batch `mb` and accumulation `accum` (cached).
const RunResult& reference(int mb, int accum) {
  static std::map<std::pair<int, int>, RunResult> cache;
  auto key = std::make_pair(mb, accum);
  auto it = cache.find(key);
  if (it == cache.end()) {
    const std::string name = "ref_mb" + std::to_string(mb) + "_acc" + std::to_string(accum);
    it = cache.emplace(key, train(name, tiny_settings(kSteps) + " --set train.micro_batch=" +
                                            std::to_string(mb) + " --set train.grad_accum=" +
                                            std::to_string(accum) + " --nproc 1")).first;
  }
  return it->second;
}

RunResult data_parallel(const std::string& name, int n, int mb, int accum, const std::string& extra,
                  const std::string& env = "") {
  return train(name, tiny_settings(kSteps) + " --nproc " + std::to_string(n) +
                         " --set train.micro_batch=" + std::to_string(mb) +
                         " --set train.grad_accum=" + std::to_string(accum) + " " + extra,
               env.empty() ? "" : "env " + env);
}

// Bucket layouts over the tiny model's 10,944 gradients (42.75 KiB).
const std::string kOneBucket = "";  // default: the 1 MiB first bucket holds everything
const std::string kTinyBuckets = "--set parallel.first_bucket_mb=0.0005 --set parallel.bucket_mb=0.001";
const std::string kOddBuckets = "--set parallel.first_bucket_mb=0.0031 --set parallel.bucket_mb=0.00723";

}  // namespace

TEST(dp, equivalence_2_ranks) {
  // Debug mode also checks the broadcast and the final replicas by checksum
  // and every collective's fingerprint across ranks.
  RunResult r = data_parallel("dp2", 2, 2, 1, kOneBucket, "MESHTRAIN_DEBUG=1 MESHTRAIN_COMM_DEBUG=1");
  EXPECT_NE(r.log.find("2 rank(s) x 1 accumulation = 4 sequences"), std::string::npos) << r.log;
  EXPECT_NE(r.log.find("1 gradient bucket(s)"), std::string::npos) << r.log;
  expect_same_training(r, reference(4, 1), kTol);
}

TEST(dp, equivalence_3_ranks_odd_buckets) {
  expect_same_training(data_parallel("dp3_odd", 3, 2, 1, kOddBuckets), reference(6, 1), kTol);
}

TEST(dp, equivalence_4_ranks_tiny_buckets) {
  RunResult r = data_parallel("dp4_tiny", 4, 1, 1, kTinyBuckets);
  EXPECT_NE(r.log.find("43 gradient bucket(s)"), std::string::npos) << r.log;
  expect_same_training(r, reference(4, 1), kTol);
}

TEST(dp, equivalence_2_ranks_grad_accum) {
  expect_same_training(data_parallel("dp2_acc", 2, 2, 3, kOddBuckets), reference(4, 3), kTol);
}

TEST(dp, equivalence_4_ranks_grad_accum_tiny_buckets) {
  expect_same_training(data_parallel("dp4_acc", 4, 1, 2, kTinyBuckets), reference(4, 2), kTol);
}

TEST(dp, equivalence_3_ranks_grad_accum_one_bucket) {
  expect_same_training(data_parallel("dp3_acc", 3, 1, 2, kOneBucket), reference(3, 2), kTol);
}
