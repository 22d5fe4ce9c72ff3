// test-links: mt_comm
// Failure handling between real processes: a killed rank, a rank that never
// arrives and mismatched calls all end in a clear error on every other rank,
// each found by its own path (a dead peer by the liveness check, well before
// the timeout; an absent one by the timeout), and no shared memory outlives
// the job. Times are asserted only as hang guards.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>

#include <atomic>
#include <new>

#include "check.h"
#include "harness.h"

using namespace meshtrain;
using namespace meshtrain::comm;
using namespace meshtrain::comm::testing;

namespace {
CommOptions short_timeout(double s, bool debug = false) {
  CommOptions o = CommOptions::from_env();
  o.timeout_s = s;
  o.debug = debug;
  return o;
}
bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
}  // namespace

TEST(comm, killed_rank_is_named_by_the_others) {
  auto w = run_world(3, [](Communicator& c) -> std::string {
    std::vector<float> v(100000, 1.0f);
    c.allreduce(v.data(), v.size(), DType::F32).wait();  // one good op first
    if (c.rank() == 2) raise(SIGKILL);
    try {
      c.allreduce(v.data(), v.size(), DType::F32).wait();
    } catch (const CommError& e) {
      return e.what();
    }
    return "no error";
  }, short_timeout(20));
  EXPECT_EQ(w.ranks[2].status, 128 + SIGKILL);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(w.ranks[r].status, 1);
    EXPECT_TRUE(contains(w.ranks[r].output, "rank 2")) << w.ranks[r].output;
    EXPECT_TRUE(contains(w.ranks[r].output, "allreduce #2")) << w.ranks[r].output;
    EXPECT_TRUE(contains(w.ranks[r].output, "400000 bytes")) << w.ranks[r].output;
    // Found by the waiters' liveness check of the dead peer ("rank 2 (pid N)
    // died"), directly or through the first finder's abort, not by the timeout.
    EXPECT_TRUE(contains(w.ranks[r].output, "died")) << w.ranks[r].output;
    EXPECT_FALSE(contains(w.ranks[r].output, "timed out")) << w.ranks[r].output;
  }
  // Hang guard only (normally well under a second): a job still running at
  // the comm timeout was not ended by the liveness check.
  EXPECT_LT(w.seconds, 20.0);
  EXPECT_TRUE(leftover_segments(w.job_id).empty());
}

TEST(comm, rank_that_never_arrives_times_out_with_its_name) {
  // Rank 1 stays alive, never calling the collective, until both others have
  // failed (a counter in memory the forked ranks share), so they can only
  // end by the 1 s timeout, not by noticing rank 1 exit.
  auto* failed = static_cast<std::atomic<int>*>(
      mmap(nullptr, sizeof(std::atomic<int>), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(failed, MAP_FAILED);
  new (failed) std::atomic<int>(0);
  auto w = run_world(3, [failed](Communicator& c) -> std::string {
    if (c.rank() == 1) {
      // Hang guard: give up after 60 s (the others time out after 1 s).
      for (int i = 0; i < 6000 && failed->load() < 2; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      return "skipped";  // never calls the collective
    }
    std::vector<double> v(10, 1.0);
    try {
      c.broadcast(v.data(), v.size(), DType::F64, 0).wait();
      c.allreduce(v.data(), v.size(), DType::F64).wait();
    } catch (const CommError& e) {
      failed->fetch_add(1);
      return e.what();
    }
    failed->fetch_add(1);
    return "no error";
  }, short_timeout(1.0));
  EXPECT_EQ(failed->load(), 2);
  munmap(failed, sizeof(std::atomic<int>));
  for (int r : {0, 2}) {
    // The timeout of a wait for rank 1, found here or by the other waiter
    // (then reported through its abort).
    EXPECT_TRUE(contains(w.ranks[r].output, "timed out after 1.0 s waiting for rank 1"))
        << w.ranks[r].output;
    EXPECT_FALSE(contains(w.ranks[r].output, "died")) << w.ranks[r].output;
  }
  // Hang guard only (normally about the 1 s timeout): rank 1's own limit is 60 s.
  EXPECT_LT(w.seconds, 60.0);
}

TEST(comm, mismatch_detector_catches_wrong_count) {
  auto w = run_world(3, [](Communicator& c) -> std::string {
    std::vector<float> v(200, 1.0f);
    c.allreduce(v.data(), 10, DType::F32).wait();
    try {
      c.allreduce(v.data(), c.rank() == 1 ? 200 : 100, DType::F32).wait();
    } catch (const CommError& e) {
      return e.what();
    }
    return "no error";
  }, short_timeout(10, /*debug=*/true));
  for (int r = 0; r < 3; ++r) {
    EXPECT_TRUE(contains(w.ranks[r].output, "different collectives")) << w.ranks[r].output;
    EXPECT_TRUE(contains(w.ranks[r].output, "count=200")) << w.ranks[r].output;
  }
}

TEST(comm, mismatch_detector_catches_wrong_op) {
  auto w = run_world(2, [](Communicator& c) -> std::string {
    std::vector<float> v(64, 1.0f);
    try {
      if (c.rank() == 0)
        c.allreduce(v.data(), v.size(), DType::F32).wait();
      else
        c.broadcast(v.data(), v.size(), DType::F32, 0).wait();
    } catch (const CommError& e) {
      return e.what();
    }
    return "no error";
  }, short_timeout(10, /*debug=*/true));
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(contains(w.ranks[r].output, "rank 0: allreduce")) << w.ranks[r].output;
    EXPECT_TRUE(contains(w.ranks[r].output, "rank 1: broadcast")) << w.ranks[r].output;
  }
}

TEST(comm, killed_job_leaves_no_shared_memory) {
  // Every rank dies abruptly while holding a shared buffer.
  auto w = run_world(3, [](Communicator& c) -> std::string {
    SharedBuffer b = c.alloc_shared(1 << 20);
    c.allreduce(b.as<float>(), 1000, DType::F32).wait();
    raise(SIGKILL);
    return "";
  }, short_timeout(10));
  for (const auto& r : w.ranks) EXPECT_EQ(r.status, 128 + SIGKILL);
  EXPECT_TRUE(leftover_segments(w.job_id).empty());
}
