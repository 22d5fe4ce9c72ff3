// test-links: mt_comm
// A rank that completes its last collective and exits at once must not be
// reported dead by a slower peer still inside that collective: everything the
// peer needs was published before the exit (and the shared memory stays
// mapped). A training run failed this way at its end-of-run memory report
// gather: the waiter looked at the peer's barrier counter (not there yet),
// was preempted, and its liveness check then found the peer already exited.
// MESHTRAIN_SHM_TEST_STALL_US widens that window so the race happens every
// time; a rank killed before it arrives must still be reported as dead.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>

#include <random>

#include "check.h"
#include "harness.h"

using namespace meshtrain;
using namespace meshtrain::comm;
using namespace meshtrain::comm::testing;

namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

CommOptions timeout_of(double s) {
  CommOptions o = CommOptions::from_env();
  o.timeout_s = s;
  return o;
}

// Waiters stall this long between their last look at a peer and their
// liveness check of it (forked ranks inherit it).
struct StallBeforeLivenessCheck {
  explicit StallBeforeLivenessCheck(long us) {
    setenv("MESHTRAIN_SHM_TEST_STALL_US", std::to_string(us).c_str(), 1);
  }
  ~StallBeforeLivenessCheck() { unsetenv("MESHTRAIN_SHM_TEST_STALL_US"); }
};

// Runs `final_op` on every rank; the last rank enters it late, so the others
// wait for it, and every rank returns (and exits) right after it. Returns
// "" when the gathered values are right.
using FinalOp = std::function<std::string(Communicator&)>;

WorldResult late_rank_exits_after(int n, const FinalOp& final_op) {
  return run_world(n, [&](Communicator& c) -> std::string {
    if (c.rank() == c.size() - 1) std::this_thread::sleep_for(std::chrono::milliseconds(60));
    return final_op(c);
  }, timeout_of(20));
}

// The failing gather: 10 doubles per rank, direct algorithm.
std::string gather_ten_doubles(Communicator& c, const char* algo) {
  c.set_algorithm(CollOp::Allgather, algo);
  std::vector<double> mine(10), all(10 * c.size());
  for (int i = 0; i < 10; ++i) mine[i] = 100.0 * c.rank() + i;
  c.allgather(mine.data(), all.data(), all.size(), DType::F64).wait();  // total count
  for (int r = 0; r < c.size(); ++r)
    for (int i = 0; i < 10; ++i)
      if (all[10 * r + i] != 100.0 * r + i)
        return fmt::format("rank {}'s value {} arrived as {}", r, i, all[10 * r + i]);
  return "";
}

void expect_all_succeed(const WorldResult& w) {
  EXPECT_TRUE(w.ok()) << w.report();
  for (const auto& r : w.ranks) EXPECT_FALSE(contains(r.output, "died")) << w.report();
  EXPECT_TRUE(leftover_segments(w.job_id).empty());
}

}  // namespace

TEST(comm, exited_peer_after_final_direct_allgather_is_not_dead) {
  StallBeforeLivenessCheck stall(150000);
  expect_all_succeed(late_rank_exits_after(4, [](Communicator& c) { return gather_ten_doubles(c, "direct"); }));
}

TEST(comm, exited_peer_after_final_barrier_is_not_dead) {
  StallBeforeLivenessCheck stall(150000);
  expect_all_succeed(late_rank_exits_after(3, [](Communicator& c) -> std::string {
    c.set_algorithm(CollOp::Barrier, "direct");
    c.barrier().wait();
    return "";
  }));
}

// Point-to-point path (FIFO channels): the late rank's slots are unread when it exits.
TEST(comm, exited_peer_after_final_ring_allgather_is_not_dead) {
  StallBeforeLivenessCheck stall(150000);
  expect_all_succeed(late_rank_exits_after(2, [](Communicator& c) { return gather_ten_doubles(c, "ring"); }));
}

// The other side of the rule: a rank that dies before arriving is still named
// as dead by the liveness check (not the timeout), with the stall in place too.
TEST(comm, peer_killed_before_final_allgather_is_still_reported_dead) {
  StallBeforeLivenessCheck stall(150000);
  for (const char* algo : {"direct", "ring"}) {
    auto w = late_rank_exits_after(2, [algo](Communicator& c) -> std::string {
      if (c.rank() == 1) raise(SIGKILL);
      std::string err = gather_ten_doubles(c, algo);
      return err.empty() ? "no error" : err;
    });
    EXPECT_EQ(w.ranks[1].status, 128 + SIGKILL) << algo;
    EXPECT_EQ(w.ranks[0].status, 3) << algo << "\n" << w.report();
    EXPECT_TRUE(contains(w.ranks[0].output, "rank 1")) << w.report();
    // Found by the liveness check of the dead peer, not by the timeout.
    EXPECT_TRUE(contains(w.ranks[0].output, "died")) << w.report();
    EXPECT_FALSE(contains(w.ranks[0].output, "timed out")) << w.report();
    // Hang guard only (normally well under a second): below the 20 s comm timeout.
    EXPECT_LT(w.seconds, 20.0);
  }
}

// Without the stall: many short jobs whose ranks leave right after a final
// gather, arriving up to 40 ms apart so that waiters run their liveness
// checks (after 20 ms) while peers finish and exit (catches the race on a
// loaded machine).
TEST(comm, ranks_leaving_at_different_speeds_after_final_gather) {
  for (int round = 0; round < 12; ++round) {
    auto w = run_world(4, [round](Communicator& c) -> std::string {
      std::mt19937 rng(round * 31 + c.rank());
      for (int i = 0; i < 2; ++i) {
        std::this_thread::sleep_for(std::chrono::microseconds(rng() % 3000));
        if (auto err = gather_ten_doubles(c, "direct"); !err.empty()) return err;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(rng() % 40000));
      return gather_ten_doubles(c, "direct");
    }, timeout_of(20));
    ASSERT_TRUE(w.ok()) << "round " << round << "\n" << w.report();
  }
}
