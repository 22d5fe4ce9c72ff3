// Local SGD / DiLoCo (parallel.local_sgd; parallel/local_sgd.h), 2 real ranks
// through `meshtrain train --nproc 2` on the tiny model:
// - H = 1 with plain averaging (outer lr 1, no outer momentum) and an inner
//   optimizer linear in the gradient (SGD with Nesterov momentum and weight
//   decay, no clipping) trains what synchronous data parallelism trains:
//   losses within 1e-5, the model files as dp_harness.h compares them.
// - H = 4 with DiLoCo's outer optimizer (lr 0.7, Nesterov momentum 0.9)
//   trains (the loss falls), sends one parameter-sized allreduce every 4th
//   step and nothing between (metrics.jsonl), and after the last average the
//   replicas are identical (MESHTRAIN_DEBUG's replica check at the end).
// - Saving or sampling between averages, ZeRO and compression are refused
//   with the reason.
#include "dp_harness.h"

using namespace dp_test;

namespace {

constexpr int kSteps = 20;

const std::string kSgd = " --set train.optimizer=sgd --set train.lr=0.1 --set train.nesterov=true"
                         " --set train.weight_decay=1e-4 --set train.clip=0";

RunResult run(const std::string& name, const std::string& extra, const std::string& prefix = "") {
  return train(name, tiny_settings(kSteps) + " --nproc 2 --set train.micro_batch=2" + extra, prefix);
}

std::string local(int h, double outer_lr = 1, double momentum = 0) {
  return " --set parallel.local_sgd.sync_every=" + std::to_string(h) +
         " --set parallel.local_sgd.outer_lr=" + std::to_string(outer_lr) +
         " --set parallel.local_sgd.outer_momentum=" + std::to_string(momentum);
}

}  // namespace

TEST(local_sgd, every_step_with_sgd_trains_as_synchronous_data_parallelism) {
  const RunResult sync = run("sync_sgd", kSgd);
  const RunResult h1 = run("local_h1", kSgd + local(1));
  ASSERT_EQ(sync.status, 0) << sync.log;
  ASSERT_EQ(h1.status, 0) << h1.log;
  EXPECT_NE(h1.log.find("local SGD: 2 ranks"), std::string::npos) << h1.log;
  expect_same_training(h1, sync, 1e-5);
  const auto m = sync.metrics();
  EXPECT_LT(m.back()["loss"].get<double>(), 0.9 * m.front()["loss"].get<double>());
}

TEST(local_sgd, diloco_every_4_steps_trains_and_ends_on_equal_replicas) {
  const RunResult r = run("diloco_h4", local(4, 0.7, 0.9) + " --set train.lr=3e-3", "env MESHTRAIN_DEBUG=1");
  ASSERT_EQ(r.status, 0) << r.log;
  const auto m = r.metrics();
  ASSERT_EQ(m.size(), static_cast<size_t>(kSteps));
  EXPECT_LT(m.back()["loss"].get<double>(), 0.9 * m.front()["loss"].get<double>());
  EXPECT_NE(r.log.find("Nesterov momentum 0.9"), std::string::npos) << r.log;
  // Bytes: one parameter-sized allreduce on every 4th step, nothing between.
  for (const auto& row : m) {
    const int step = row["step"];
    const double wire = row.at("grad_wire_bytes"), dense = row.at("grad_dense_bytes");
    ASSERT_GT(dense, 0);
    EXPECT_EQ(wire, step % 4 == 0 ? dense : 0.0) << "step " << step;
  }
}

TEST(local_sgd, refused_where_replicas_would_differ_or_be_sharded) {
  const RunResult ck = run("local_ck", local(4) + " --set checkpoint.every=6");
  EXPECT_NE(ck.status, 0);
  EXPECT_NE(ck.log.find("checkpoint.every = 6 is not a multiple of parallel.local_sgd.sync_every = 4"),
            std::string::npos) << ck.log;
  const RunResult z = run("local_z1", local(4) + " --set zero.stage=1");
  EXPECT_NE(z.status, 0);
  EXPECT_NE(z.log.find("which ZeRO shards"), std::string::npos) << z.log;
  const RunResult c = run("local_topk", local(4) + " --set comm.compression.type=topk");
  EXPECT_NE(c.status, 0);
  EXPECT_NE(c.log.find("no gradients to compress"), std::string::npos) << c.log;
}
