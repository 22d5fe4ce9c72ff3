// Data-parallel jobs never hang: a rank that fails (bad data on that rank, a
// diverged loss, a wrong setting) stops the whole job by its own error (not a
// peer's timeout), with a message naming the rank and the cause, and a
// non-zero exit.
#include <chrono>

#include "dp_harness.h"
#include "meshtrain/data/token_shard.h"

using namespace dp_test;

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

TEST(dp, rank_with_bad_data_stops_the_job) {
  // One window holds a token outside the vocabulary; whichever rank draws it fails.
  std::vector<uint16_t> tokens(2000, 'a');
  tokens[1234] = 300;
  const fs::path shard = workdir() / "bad_000000.bin";
  meshtrain::data::write_token_shard(shard.string(), tokens);
  const auto t0 = std::chrono::steady_clock::now();
  RunResult r = train("bad_data", tiny_settings(400) + " --nproc 3 --set train.eval_every=0 "
                      "--set data.val= --set data.train=" + shard.string() +
                      " --set comm.timeout_s=60");
  EXPECT_EQ(r.status, 1) << r.log;
  EXPECT_NE(r.log.find("300"), std::string::npos) << r.log;
  EXPECT_NE(r.log.find("training failed: rank "), std::string::npos) << r.log;
  // Stopped by the failing rank's own error (the launcher then ends the
  // others), not by a peer's 60 s comm timeout.
  EXPECT_EQ(r.log.find("timed out"), std::string::npos) << r.log;
  // Hang guard only (normally a few seconds): below that comm timeout.
  EXPECT_LT(seconds_since(t0), 60);
}

TEST(dp, diverged_loss_stops_every_rank_at_the_same_step) {
  RunResult r = train("diverged", tiny_settings(50) + " --nproc 3 --set train.warmup=0 "
                      "--set train.lr=1e30 --set train.eval_every=0");
  EXPECT_EQ(r.status, 1) << r.log;
  EXPECT_NE(r.log.find(": training diverged: 5 consecutive steps"), std::string::npos) << r.log;
  // The skip decisions come from reduced values, so rank 0 logged the same
  // steps as skipped that every rank skipped, and nobody went on to step 50.
  const auto rows = r.metrics();
  ASSERT_FALSE(rows.empty());
  EXPECT_LT(rows.size(), 50u);
  EXPECT_TRUE(rows.back()["skipped"].get<bool>());
}

TEST(dp, dp_setting_needs_matching_ranks) {
  RunResult r = train("dp_mismatch", tiny_settings(2) + " --set parallel.dp=2");
  EXPECT_EQ(r.status, 1) << r.log;
  EXPECT_NE(r.log.find("parallel.dp = 2 but the job has 1 rank(s); run with --nproc 2"),
            std::string::npos) << r.log;
  RunResult r3 = train("dp_mismatch3", tiny_settings(2) + " --nproc 3 --set parallel.dp=2");
  EXPECT_EQ(r3.status, 1) << r3.log;
  EXPECT_NE(r3.log.find("parallel.dp = 2 but the job has 3 rank(s)"), std::string::npos) << r3.log;
}
