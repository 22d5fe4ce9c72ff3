// test-links: mt_ckpt
// The memory tier's pure parts: which rank keeps whose copy (NodeMap), how a
// node root is pruned, and where a run's copies live. The collective parts
// (buddy exchange, gathering after a lost node, the disk fallback) run in
// tests/cli/chaos_buddy_memory.sh with real processes and kills.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "meshtrain/ckpt/buddy_copies.h"
#include "meshtrain/ckpt/checkpoint_dir.h"
#include "meshtrain/ckpt/checkpoint_index.h"
#include "meshtrain/ckpt/memory_tier.h"

namespace fs = std::filesystem;
using meshtrain::ckpt::NodeMap;

TEST(ckpt_buddy, buddy_is_the_same_local_rank_on_the_next_node) {
  const NodeMap two{{0, 0, 1, 1}};
  EXPECT_EQ(two.buddy(0), 2);
  EXPECT_EQ(two.buddy(1), 3);
  EXPECT_EQ(two.buddy(2), 0);
  EXPECT_EQ(two.buddy(3), 1);
  EXPECT_EQ(two.leader(1), 2);
  // Three nodes of unequal size (node ids need not be dense): every buddy on another node.
  const NodeMap uneven{{4, 4, 4, 7, 9, 9}};
  for (int r = 0; r < uneven.world(); ++r) {
    ASSERT_GE(uneven.buddy(r), 0);
    EXPECT_NE(uneven.node_of[uneven.buddy(r)], uneven.node_of[r]) << "rank " << r;
  }
  EXPECT_EQ(uneven.buddy(0), 3);
  EXPECT_EQ(uneven.buddy(1), 3);  // node 7 has one rank: it keeps both copies
  EXPECT_EQ(uneven.buddy(3), 4);
  EXPECT_EQ(uneven.buddy(5), 1);  // local rank 1 of node 9 -> local rank 1 of node 4
}

TEST(ckpt_buddy, one_node_has_no_buddies) {
  const NodeMap one{{0, 0, 0}};
  for (int r = 0; r < 3; ++r) EXPECT_EQ(one.buddy(r), -1);
}

TEST(ckpt_buddy, prune_keeps_the_newest_indexed_steps_and_anything_newer) {
  const fs::path root = fs::temp_directory_path() / ("mt_buddy_prune_" + std::to_string(getpid()));
  fs::remove_all(root);
  for (int step : {2, 4, 6, 8}) {
    const fs::path dir = meshtrain::ckpt::step_dir(root.string(), step);
    fs::create_directories(dir);
    std::ofstream(dir / "shard_00000_of_00004.safetensors") << "x";
    if (step != 8) std::ofstream(dir / meshtrain::ckpt::kIndexFileName) << "{}";  // 8: still being written
  }
  meshtrain::ckpt::prune_node_root(root.string(), 2);
  EXPECT_FALSE(fs::exists(meshtrain::ckpt::step_dir(root.string(), 2)));
  EXPECT_TRUE(fs::exists(meshtrain::ckpt::step_dir(root.string(), 4)));
  EXPECT_TRUE(fs::exists(meshtrain::ckpt::step_dir(root.string(), 6)));
  EXPECT_TRUE(fs::exists(meshtrain::ckpt::step_dir(root.string(), 8)));
  EXPECT_EQ(meshtrain::ckpt::newest_indexed_step(root.string()), 6);
  fs::remove_all(root);
}

TEST(ckpt_buddy, a_run_finds_its_store_by_its_checkpoint_directory) {
  using meshtrain::ckpt::memory_store;
  const std::string a = memory_store("/dev/shm", "runs/a/ckpt");
  EXPECT_EQ(a, memory_store("/dev/shm", fs::absolute("runs/a/ckpt").string()));
  EXPECT_NE(a, memory_store("/dev/shm", "runs/b/ckpt"));
  EXPECT_EQ(a.rfind("/dev/shm/meshtrain-ckpt-", 0), 0u) << a;
  EXPECT_EQ(meshtrain::ckpt::memory_node_root(a, 3), a + "/node-3");
}
