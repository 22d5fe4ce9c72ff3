// test-links: mt_parallel
// The device mesh: the rank <-> coordinate layout (tp innermost, pp
// outermost) as pure functions, and real per-axis communicators split from a
// world of 4 and 8 processes: an allreduce over each axis sums exactly the
// ranks of that axis's group.
#include <gtest/gtest.h>

#include <numeric>

#include "../comm/harness.h"
#include "meshtrain/core/error.h"
#include "meshtrain/parallel/mesh.h"

using namespace meshtrain;
using namespace meshtrain::parallel;
using meshtrain::comm::Communicator;
using meshtrain::comm::testing::run_world;

TEST(mesh, coordinates_round_trip_with_tp_innermost) {
  const MeshShape s{3, 2, 2};  // dp 3, tp 2, pp 2: 12 ranks
  for (int r = 0; r < s.size(); ++r) EXPECT_EQ(mesh_rank(s, mesh_coords(s, r)), r);
  EXPECT_EQ(mesh_coords(s, 1), (MeshCoords{0, 1, 0}));   // next rank: next tp shard
  EXPECT_EQ(mesh_coords(s, 2), (MeshCoords{1, 0, 0}));   // then the next replica
  EXPECT_EQ(mesh_coords(s, 6), (MeshCoords{0, 0, 1}));   // pp outermost
  EXPECT_EQ(mesh_group(s, 7, Axis::TP), (std::vector<int>{6, 7}));
  EXPECT_EQ(mesh_group(s, 7, Axis::DP), (std::vector<int>{7, 9, 11}));
  EXPECT_EQ(mesh_group(s, 7, Axis::PP), (std::vector<int>{1, 7}));
  EXPECT_THROW(check_mesh(s, 8), Error);
  EXPECT_THROW(check_mesh({0, 1, 1}, 0), Error);
  EXPECT_NO_THROW(check_mesh(s, 12));
}

TEST(mesh, single_rank_has_no_communicators) {
  Mesh m(Communicator(), {1, 1, 1});
  EXPECT_EQ(m.world_size(), 1);
  for (Axis a : {Axis::DP, Axis::TP, Axis::PP}) EXPECT_FALSE(m.comm(a).valid());
  EXPECT_THROW(Mesh(Communicator(), {2, 1, 1}), Error);
}

namespace {
// On every rank: each axis communicator's allreduce of the world rank is the
// sum of the expected group, and its rank is the axis coordinate.
std::string check_axes(Communicator& world, MeshShape shape) {
  Mesh m(world, shape);
  for (Axis a : {Axis::DP, Axis::TP, Axis::PP}) {
    const std::vector<int> group = mesh_group(shape, world.rank(), a);
    if (group.size() == 1) {
      if (m.comm(a).valid()) return std::string(axis_name(a)) + " of one rank has a communicator";
      continue;
    }
    Communicator c = m.comm(a);
    if (c.size() != static_cast<int>(group.size()) || c.rank() != m.rank(a))
      return m.describe() + ": " + axis_name(a) + " communicator is rank " +
             std::to_string(c.rank()) + " of " + std::to_string(c.size());
    const int64_t sum = c.allreduce_scalar(static_cast<int64_t>(world.rank()), comm::ReduceOp::Sum);
    const int64_t want = std::accumulate(group.begin(), group.end(), int64_t{0});
    if (sum != want)
      return m.describe() + ": " + axis_name(a) + " sum " + std::to_string(sum) + " != " +
             std::to_string(want);
  }
  return "";
}
}  // namespace

TEST(mesh, dp2_tp2_communicators_hold_their_groups) {
  const auto w = run_world(4, [](Communicator& c) { return check_axes(c, {2, 2, 1}); });
  EXPECT_TRUE(w.ok()) << w.report();
}

TEST(mesh, dp2_tp2_pp2_communicators_hold_their_groups) {
  const auto w = run_world(8, [](Communicator& c) { return check_axes(c, {2, 2, 2}); });
  EXPECT_TRUE(w.ok()) << w.report();
}
