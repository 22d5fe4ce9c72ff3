// Data parallelism without other processes: the bucket plan, the bucket
// launches driven by GPT's grad-ready hook (a world of one rank), and the
// rank slicing of the data that data parallelism relies on.
#include <gtest/gtest.h>

#include <filesystem>
#include <numeric>
#include <set>

#include "meshtrain/comm/communicator.h"
#include "meshtrain/data/data_loader.h"
#include "meshtrain/data/token_shard.h"
#include "meshtrain/nn/gpt.h"
#include "meshtrain/parallel/bucket_plan.h"
#include "meshtrain/parallel/data_parallel.h"

using namespace meshtrain;
using parallel::Bucket;

TEST(dp, bucket_plan_covers_the_buffer_top_down) {
  for (auto [total, first, cap] : {std::tuple<int64_t, int64_t, int64_t>{10944, 131, 262},
                                   {10944, 1 << 18, 1 << 22}, {7, 1, 1}, {1000, 3, 7}}) {
    const auto b = parallel::plan_buckets(total, first, cap);
    ASSERT_FALSE(b.empty());
    EXPECT_EQ(b.front().end, total);
    EXPECT_EQ(b.back().begin, 0);
    EXPECT_EQ(b.front().count(), std::min(total, first));
    for (size_t i = 1; i < b.size(); ++i) {
      EXPECT_EQ(b[i].end, b[i - 1].begin);  // contiguous, launch order = backward order
      EXPECT_GE(b[i].count(), 1);
      EXPECT_LE(b[i].count(), cap);
    }
  }
  EXPECT_TRUE(parallel::plan_buckets(0, 1, 1).empty());
  EXPECT_THROW(parallel::plan_buckets(10, 0, 1), Error);
}

TEST(dp, buckets_launch_from_the_grad_ready_hook_in_a_world_of_one) {
  GPTConfig cfg = gpt_preset("tiny");
  cfg.vocab_size = 256;
  cfg.padded_vocab = pad_vocab(256);
  parallel::DataParallelOptions o;
  o.first_bucket_bytes = 1000;
  o.bucket_bytes = 4000;
  o.verify = true;
  parallel::DataParallel dp(comm::Communicator::create_local(0, 1, "dp-unit-test"),
                            cfg.num_params(), o);
  GPT model(cfg, dp.gradient_buffer());
  model.init_weights(3);
  dp.attach(model);
  dp.broadcast_parameters();
  std::vector<int32_t> in(2 * cfg.seq_len), tg(2 * cfg.seq_len);
  std::iota(in.begin(), in.end(), 0);
  std::iota(tg.begin(), tg.end(), 1);
  model.zero_grad();
  model.forward(in.data(), tg.data(), 2, cfg.seq_len);
  dp.begin_backward(true);
  model.backward();
  dp.finish_gradients();
  EXPECT_EQ(dp.timing().buckets, static_cast<int>(dp.buckets().size()));
  EXPECT_GT(dp.buckets().size(), 5u);
  // Backward reports ln_f, each layer from the last, then the embeddings
  // [0, layer 0's begin): every bucket lying wholly at or above layer 0's
  // begin went out before that last report, while backward still ran (an
  // order of events, counted; not the times, which a loaded machine stretches).
  const int64_t layer0_begin = model.params().layer_range(0).first;
  int ahead = 0;
  for (const Bucket& b : dp.buckets()) ahead += b.begin >= layer0_begin ? 1 : 0;
  EXPECT_GT(ahead, 0);
  EXPECT_EQ(dp.timing().launched_ahead, ahead);
  EXPECT_DOUBLE_EQ(dp.average(3.5), 3.5);
  EXPECT_TRUE(dp.all(true));
  EXPECT_FALSE(dp.all(false));
  // Earlier micro-batches of an accumulation launch nothing.
  model.forward(in.data(), tg.data(), 2, cfg.seq_len);
  dp.begin_backward(false);
  model.backward();
  EXPECT_THROW(dp.finish_gradients(), Error);
}

TEST(dp, ranks_read_disjoint_slices_covering_each_global_batch) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("mt_dp_unit_" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::vector<uint16_t> tokens(5000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>(i % 251);
  data::write_token_shard((dir / "t_000000.bin").string(), tokens);
  const int world = 3, batch = 2;
  data::LoaderOptions one;
  one.pattern = (dir / "t_*.bin").string();
  one.batch = world * batch;
  one.seq_len = 16;
  one.prefetch = 0;
  data::DataLoader reference(one);
  std::vector<std::unique_ptr<data::DataLoader>> ranks;
  for (int r = 0; r < world; ++r) {
    data::LoaderOptions o = one;
    o.batch = batch;
    o.rank = r;
    o.world_size = world;
    ranks.push_back(std::make_unique<data::DataLoader>(o));
  }
  std::set<int64_t> seen;
  for (int64_t k = 0; k < reference.batches_per_epoch(); ++k) {
    std::vector<int64_t> together;
    for (auto& l : ranks) {
      auto ids = l->window_ids({0, k});
      together.insert(together.end(), ids.begin(), ids.end());
    }
    EXPECT_EQ(together, reference.window_ids({0, k})) << "global batch " << k;
    for (int64_t id : together) EXPECT_TRUE(seen.insert(id).second) << "window " << id << " twice";
  }
  // An epoch covers every window except the dropped tail (< one global batch).
  EXPECT_GT(static_cast<int64_t>(seen.size()), reference.num_windows() - world * batch);
  fs::remove_all(dir);
}
