// test-links: mt_comm
// Point-to-point on its own lanes, between real processes over the shm
// transport: a send issued behind a collective, sends to one peer beside
// receives from another, simultaneous large sends, per-peer FIFO order, and
// the debug check's collective numbering unaffected by a rank's p2p.
#include <gtest/gtest.h>

#include "check.h"
#include "harness.h"

using namespace meshtrain;
using namespace meshtrain::comm;
using namespace meshtrain::comm::testing;

namespace {

CommOptions short_timeout(bool debug = false) {
  CommOptions o = CommOptions::from_env();
  o.timeout_s = 20;  // a send queued behind the collective would time out here
  o.debug = debug;
  return o;
}

}  // namespace

TEST(comm, p2p_has_its_own_lanes_3_ranks) {
  auto w = run_world(3, [](Communicator& c) { return check_p2p_lanes(c); }, short_timeout());
  EXPECT_TRUE(w.ok()) << w.report();
}

TEST(comm, p2p_has_its_own_lanes_4_ranks_in_a_split) {
  auto w = run_world(4, [](Communicator& c) {
    // The lanes of a sub-communicator are its own too.
    Communicator all = c.split(0, c.size() - 1 - c.rank());
    return check_p2p_lanes(all);
  }, short_timeout());
  EXPECT_TRUE(w.ok()) << w.report();
}

TEST(comm, debug_check_counts_collectives_apart_from_p2p) {
  auto w = run_world(3, [](Communicator& c) {
    std::string e;
    int32_t v = 7;
    // Only ranks 0 and 1 exchange; rank 2's next collective must still
    // carry the same number as theirs.
    if (c.rank() == 0) c.send(&v, 1, DType::I32, 1).wait();
    if (c.rank() == 1) c.recv(&v, 1, DType::I32, 0).wait();
    double s = c.allreduce_scalar(1.0);
    if (s != 3.0 || v != 7) e = "wrong values";
    return e;
  }, short_timeout(/*debug=*/true));
  EXPECT_TRUE(w.ok()) << w.report();
}
