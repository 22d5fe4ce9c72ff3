// test-links: mt_comm
// Pure functions of the comm layer: reductions, blocks, options, the cost
// model, algorithm selection and the shm exchange-mode tuner.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "meshtrain/comm/algorithms/algorithm.h"
#include "meshtrain/comm/communicator.h"
#include "meshtrain/comm/transport_registry.h"
#include "meshtrain/comm/cost_model.h"
#include "meshtrain/comm/reduce.h"
#include "meshtrain/comm/transports/shm/exchange_tuner.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/half.h"

using namespace meshtrain;
using namespace meshtrain::comm;

TEST(comm, blocks_cover_counts_not_divisible_by_ranks) {
  for (size_t count : {0, 1, 5, 7, 1000, 1001}) {
    for (int n : {1, 2, 3, 8}) {
      size_t next = 0;
      for (int p = 0; p < n; ++p) {
        Block b = block_of(count, n, p);
        EXPECT_EQ(b.offset, next);
        next += b.count;
      }
      EXPECT_EQ(next, count);
    }
  }
}

TEST(comm, reduce_many_half_types_accumulate_in_f32) {
  // 1 + 2^-9 * 8: each bf16 step alone would round the small parts away.
  std::vector<uint16_t> a(1, f32_to_bf16(256.0f)), b(1, f32_to_bf16(0.75f)), c(1, f32_to_bf16(0.75f));
  const void* srcs[] = {a.data(), b.data(), c.data()};
  uint16_t out = 0;
  reduce_many(&out, srcs, 3, 1, DType::BF16, ReduceOp::Sum);
  EXPECT_EQ(bf16_to_f32(out), 258.0f);
}

TEST(comm, reduce_ops_per_dtype) {
  int64_t x[3] = {5, -2, 9}, y[3] = {1, 4, -9};
  reduce_into(x, y, 3, DType::I64, ReduceOp::Max);
  EXPECT_EQ(x[0], 5);
  EXPECT_EQ(x[1], 4);
  EXPECT_EQ(x[2], 9);
  float f[2] = {1.f, 3.f}, g[2] = {2.f, -1.f};
  reduce_into(f, g, 2, DType::F32, ReduceOp::Min);
  EXPECT_EQ(f[0], 1.f);
  EXPECT_EQ(f[1], -1.f);
  double p[2] = {1.5, -2.0}, q[2] = {-4.0, 0.25};
  reduce_into(p, q, 2, DType::F64, ReduceOp::Product);
  EXPECT_EQ(p[0], -6.0);
  EXPECT_EQ(p[1], -0.5);
  int32_t avg[2] = {7, -7};
  scale_avg(avg, 2, DType::I32, 2);
  EXPECT_EQ(avg[0], 3);
  EXPECT_EQ(avg[1], -3);
  EXPECT_THROW(check_reducible(DType::U8), UsageError);
}

TEST(comm, options_from_environment) {
  setenv("MESHTRAIN_COMM_ALGO", "allreduce=ring,broadcast:tree", 1);
  setenv("MESHTRAIN_COMM_ALGO_REDUCE_SCATTER", "direct", 1);
  setenv("MESHTRAIN_COMM_TIMEOUT", "2.5", 1);
  CommOptions o = CommOptions::from_env();
  EXPECT_EQ(o.algorithm[static_cast<size_t>(CollOp::Allreduce)], "ring");
  EXPECT_EQ(o.algorithm[static_cast<size_t>(CollOp::Broadcast)], "tree");
  EXPECT_EQ(o.algorithm[static_cast<size_t>(CollOp::ReduceScatter)], "direct");
  EXPECT_DOUBLE_EQ(o.timeout_s, 2.5);
  setenv("MESHTRAIN_COMM_ALGO", "allreduce", 1);
  EXPECT_THROW(CommOptions::from_env(), UsageError);
  unsetenv("MESHTRAIN_COMM_ALGO");
  unsetenv("MESHTRAIN_COMM_ALGO_REDUCE_SCATTER");
  unsetenv("MESHTRAIN_COMM_TIMEOUT");
}

TEST(comm, cost_model_prefers_direct_on_shm_and_roundtrips) {
  CostModel m = CostModel::defaults();
  std::vector<std::string> cands = {"direct", "ring", "tree", "halving_doubling"};
  EXPECT_EQ(m.choose("shm", CollOp::Allreduce, 8, 2, cands), "direct");
  EXPECT_EQ(m.choose("shm", CollOp::Allreduce, 64 << 20, 2, cands), "direct");
  // Large reduce-scatter and allgather on shm: direct, not ring (measured 2.4-6x apart).
  for (int n : {2, 4, 8})
    for (CollOp op : {CollOp::ReduceScatter, CollOp::Allgather})
      EXPECT_EQ(m.choose("shm", op, 64 << 20, n, {"direct", "ring"}), "direct") << n;
  // Tree beats ring for tiny messages on many ranks over MPI point-to-point.
  EXPECT_NE(m.choose("mpi", CollOp::Allreduce, 8, 64, {"ring", "tree"}), "ring");
  std::string path = ::testing::TempDir() + "/comm_cost.json";
  m.set("shm", "ring", {0.1, 1e-6});
  m.save(path);
  CostModel back = CostModel::load(path);
  EXPECT_DOUBLE_EQ(back.get("shm", "ring").alpha_us, 0.1);
  EXPECT_EQ(back.choose("shm", CollOp::Allreduce, 64 << 20, 2, cands), "ring");
}

TEST(comm, every_algorithm_is_selectable_by_name) {
  Communicator c = Communicator::create_local(0, 1, "unit");
  for (const auto& a : all_algorithms()) {
    for (size_t i = 0; i < kCollOpCount; ++i) {
      auto op = static_cast<CollOp>(i);
      if (a.supports(op, c.transport()) && op != CollOp::Send && op != CollOp::Recv) {
        c.set_algorithm(op, std::string(a.name));
        EXPECT_EQ(c.algorithm_for(op, 100), a.name);
      }
    }
  }
  EXPECT_THROW(c.set_algorithm(CollOp::Allreduce, "nonsense"), UsageError);
  EXPECT_THROW(c.set_algorithm(CollOp::Alltoall, "tree"), UsageError);
  // A world of one: every collective is a copy.
  float x[3] = {1, 2, 3}, y[3] = {};
  c.set_algorithm(CollOp::Allreduce, "auto");
  c.allreduce(x, y, 3, DType::F32, ReduceOp::Avg).wait();
  EXPECT_EQ(y[2], 3.0f);
  EXPECT_EQ(c.allreduce_scalar(2.5), 2.5);
}

// Work::started(): an operation handed to the progress engine is marked as
// begun by the engine's thread; one run inline on the caller never is (it
// returns complete). DataParallel counts started buckets to show overlap.
TEST(comm, work_started_marks_operations_run_by_the_engine_thread) {
  float x[3] = {1, 2, 3}, y[3] = {};
  CommOptions queued = CommOptions::from_env();
  queued.inline_bytes = 0;  // never on the caller
  Communicator q = Communicator::create_local(0, 1, "unit-started-q", queued);
  Work w = q.allreduce(x, y, 3, DType::F32, ReduceOp::Sum);
  w.wait();
  EXPECT_TRUE(w.started());
  CommOptions inline_ok = CommOptions::from_env();
  inline_ok.inline_bytes = 1 << 20;
  Communicator c = Communicator::create_local(0, 1, "unit-started-i", inline_ok);
  Work v = c.allreduce(x, y, 3, DType::F32, ReduceOp::Sum);  // an idle engine: runs here
  EXPECT_TRUE(v.test());
  EXPECT_FALSE(v.started());
  EXPECT_FALSE(Work().started());
}

TEST(comm, world_from_environment) {
  setenv("MESHTRAIN_RANK", "2", 1);
  setenv("MESHTRAIN_WORLD_SIZE", "4", 1);
  setenv("MESHTRAIN_LOCAL_RANK", "0", 1);
  setenv("MESHTRAIN_LOCAL_WORLD_SIZE", "2", 1);
  setenv("MESHTRAIN_JOB_ID", "abc", 1);
  WorldInfo w = world_from_env();
  EXPECT_EQ(w.rank, 2);
  EXPECT_EQ(w.size, 4);
  EXPECT_EQ(w.local_size, 2);
  EXPECT_EQ(w.job_id, "abc");
  EXPECT_EQ(w.source, "meshtrain");
  setenv("MESHTRAIN_RANK", "4", 1);
  EXPECT_THROW(world_from_env(), Error);
  for (const char* v : {"MESHTRAIN_RANK", "MESHTRAIN_WORLD_SIZE", "MESHTRAIN_LOCAL_RANK",
                        "MESHTRAIN_LOCAL_WORLD_SIZE", "MESHTRAIN_JOB_ID"})
    unsetenv(v);
}

// srun --mpi=pmix: the place comes from Slurm, the ranks talk MPI; the
// node's task count from SLURM_STEP_TASKS_PER_NODE's compressed form.
TEST(comm, world_from_slurm_with_pmix) {
  const std::vector<std::pair<const char*, const char*>> env = {
      {"PMIX_RANK", "5"}, {"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "7"}, {"SLURM_LOCALID", "0"},
      {"SLURM_NODEID", "2"}, {"SLURM_STEP_TASKS_PER_NODE", "3(x2),1"}, {"SLURM_JOB_ID", "41"},
      {"SLURM_STEP_ID", "0"}};
  for (auto [k, v] : env) setenv(k, v, 1);
  WorldInfo w = world_from_env();
  EXPECT_EQ(w.source, "slurm-pmix");
  EXPECT_TRUE(w.under_mpi());
  EXPECT_EQ(w.rank, 5);
  EXPECT_EQ(w.size, 7);
  EXPECT_EQ(w.local_size, 1);
  EXPECT_EQ(w.job_id, "41.0");
  setenv("SLURM_NODEID", "1", 1);
  setenv("SLURM_LOCALID", "2", 1);
  EXPECT_EQ(world_from_env().local_size, 3);
  setenv("SLURM_STEP_TASKS_PER_NODE", "3(x", 1);
  EXPECT_THROW(world_from_env(), Error);
  setenv("SLURM_STEP_TASKS_PER_NODE", "2", 1);  // one node listed, node 1 asked
  EXPECT_THROW(world_from_env(), Error);
  unsetenv("PMIX_RANK");  // plain srun: Slurm's place, no MPI
  setenv("SLURM_STEP_TASKS_PER_NODE", "3(x2),1", 1);
  EXPECT_EQ(world_from_env().source, "slurm");
  EXPECT_FALSE(world_from_env().under_mpi());
  for (auto [k, v] : env) unsetenv(k);
}

TEST(comm, exchange_tuner_keeps_the_faster_way_and_explores) {
  unsetenv("MESHTRAIN_SHM_EXCHANGE");
  ExchangeTuner tuner;
  const size_t bytes = 4u << 20;
  // Stream costs half of cache per byte here; the cold first op is unmeasured.
  auto run = [&](ExchangeMode m) { tuner.record(m, bytes, m == ExchangeMode::Stream ? 1000 : 2000); };
  std::vector<ExchangeMode> seen;
  const int ops = 4 * ExchangeTuner::kExploreEvery;
  for (int op = 0; op < ops; ++op) {
    ExchangeMode m = tuner.choose(bytes);
    seen.push_back(m);
    run(m);
  }
  // After the cold op, the trials alternate.
  for (uint32_t op = 1; op <= ExchangeTuner::kTrials; ++op)
    EXPECT_EQ(seen[op], op % 2 ? ExchangeMode::Cache : ExchangeMode::Stream) << op;
  int cache_after_trials = 0;
  for (int op = ExchangeTuner::kTrials + 1; op < ops; ++op) cache_after_trials += seen[op] == ExchangeMode::Cache;
  // Only the exploration ops (kExploreEvery apart) try the slower way.
  EXPECT_EQ(cache_after_trials, 3);
  // One preempted run (50x slower) does not flip the choice.
  EXPECT_EQ(tuner.preferred(bytes), ExchangeMode::Stream);
  tuner.record(ExchangeMode::Stream, bytes, 50000);
  EXPECT_EQ(tuner.preferred(bytes), ExchangeMode::Stream);
  // When the machine changes so that cache mode becomes faster, the tuner follows
  // at the next exploration.
  auto run2 = [&](ExchangeMode m) { tuner.record(m, bytes, m == ExchangeMode::Stream ? 3000 : 1000); };
  std::vector<ExchangeMode> later;
  for (int op = 0; op < 3 * ExchangeTuner::kExploreEvery; ++op) {
    ExchangeMode m = tuner.choose(bytes);
    later.push_back(m);
    run2(m);
  }
  EXPECT_EQ(tuner.preferred(bytes), ExchangeMode::Cache);
  EXPECT_EQ(later.back(), ExchangeMode::Cache);
  // Another size class is measured on its own.
  EXPECT_EQ(tuner.choose(1u << 20), ExchangeMode::Cache);
}

TEST(comm, exchange_tuner_obeys_the_environment) {
  setenv("MESHTRAIN_SHM_EXCHANGE", "stream", 1);
  ExchangeTuner forced;
  for (int op = 0; op < 40; ++op) EXPECT_EQ(forced.choose(1u << 20), ExchangeMode::Stream);
  setenv("MESHTRAIN_SHM_EXCHANGE", "sideways", 1);
  try {
    ExchangeTuner bad;
    ADD_FAILURE() << "a bad MESHTRAIN_SHM_EXCHANGE was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("auto, cache or stream"), std::string::npos) << e.what();
  }
  unsetenv("MESHTRAIN_SHM_EXCHANGE");
}

// Transports come from the registry by name (comm/transport_registry.h); an
// unknown one is a usage error naming the known backends.
TEST(comm, transport_registry_makes_known_backends_and_names_them_otherwise) {
  std::vector<std::string> names;
  for (const auto& b : meshtrain::comm::transport_backends()) names.push_back(b.name);
  EXPECT_NE(std::find(names.begin(), names.end(), "shm"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "mpi"), names.end());
  auto t = meshtrain::comm::make_transport(
      "shm", {0, 1, "registry-test-" + std::to_string(getpid()), "w0", 5.0});
  ASSERT_TRUE(t);
  EXPECT_EQ(t->kind(), "shm");
  EXPECT_EQ(t->size(), 1);
  try {
    meshtrain::comm::make_transport("nccl", {});
    ADD_FAILURE() << "an unknown transport was made";
  } catch (const meshtrain::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("known: shm, mpi"), std::string::npos) << e.what();
  }
}
