// Sharded checkpoints across real processes (shm communicator): 4 ranks save
// (each writes only its slice; optimizer state held ZeRO-style, each rank
// owning just its range), then worlds of 2, 3 and 1 ranks load it back, each
// rank asking for the whole parameter buffer and its own optimizer range.
// Every loaded element must equal the saved one.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "../comm/harness.h"
#include "meshtrain/ckpt/checkpoint_reader.h"
#include "meshtrain/ckpt/checkpoint_writer.h"
#include "meshtrain/ckpt/model_checkpoint.h"
#include "meshtrain/nn/model_registry.h"
#include "meshtrain/ckpt/resume.h"

using namespace meshtrain;
using namespace meshtrain::ckpt;
using meshtrain::comm::Communicator;
using meshtrain::comm::testing::run_world;
namespace fs = std::filesystem;

namespace {

// Odd sizes so the last shard is short for every world size tested.
constexpr int64_t kParamsN = 100003;

// The saved value of element i of each buffer: distinct per buffer and element.
float value(int buffer, int64_t i) { return static_cast<float>(buffer * 1000003 + i) * 0.5f; }

std::string fresh_root(const std::string& name) {
  std::string root = (fs::temp_directory_path() /
                      ("meshtrain_ckpt_mp_" + std::to_string(::getpid()) + "_" + name)).string();
  fs::remove_all(root);
  return root;
}

// Saves step 10 (and an earlier step 5) from every rank of c.
std::string save_world(Communicator& c, const std::string& root) {
  const int r = c.rank(), w = c.size();
  std::vector<float> params(kParamsN);
  for (int64_t i = 0; i < kParamsN; ++i) params[i] = value(0, i);
  // Optimizer state: this rank holds only its own range, NaN elsewhere
  // would show if the writer read outside it.
  const ElemRange mine = shard_range(kParamsN, w, r);
  std::vector<float> m(mine.count()), v(mine.count());
  for (int64_t i = mine.begin; i < mine.end; ++i) {
    m[i - mine.begin] = value(1, i);
    v[i - mine.begin] = value(2, i);
  }
  WriterOptions o;
  o.root = root;
  o.keep_last = 0;
  CheckpointWriter writer(o, &c);
  for (int64_t step : {5, 10}) {
    SaveRequest req;
    req.step = step;
    req.model = model_preset("tiny")->to_json();
    req.mesh = {w, 1, 1};
    req.buffers = {{kParams, DType::F32, kParamsN, params.data(), {0, kParamsN}},
                   {kExpAvg, DType::F32, kParamsN, m.data(), mine},
                   {kExpAvgSq, DType::F32, kParamsN, v.data(), mine}};
    req.tensors = {{"all", {kParamsN}, DType::F32, kParams, {0, kParamsN}}};
    req.data_position = {1, step};
    req.rng = {{"rank", r}, {"step", step}};
    req.optimizer_steps = step;
    writer.save(req);
  }
  writer.wait();
  if (writer.stats().size() != 2) return "expected two finished saves";
  return "";
}

// Loads the newest checkpoint onto this world and checks every element.
// own_params_only: ZeRO-3-like, each rank asks for its own parameter range
// too, so ranks touch different shard files.
std::string load_world(Communicator& c, const std::string& root, int saved_world,
                       int64_t want_step = 10, bool own_params_only = false) {
  const int r = c.rank(), w = c.size();
  std::vector<float> params(kParamsN, NAN);
  const ElemRange mine = shard_range(kParamsN, w, r);
  const ElemRange param_range = own_params_only ? mine : ElemRange{0, kParamsN};
  std::vector<float> m(mine.count(), NAN), v(mine.count(), NAN);
  ResumeOptions o;
  o.comm = &c;
  auto res = resume_latest(root, {{kParams, param_range, params.data() + param_range.begin},
                                  {kExpAvg, mine, m.data()},
                                  {kExpAvgSq, mine, v.data()}}, o);
  if (!res) return "no checkpoint resumed";
  std::string e;
  if (res->index.step != want_step) e += fmt::format("resumed step {} ", res->index.step);
  if (res->index.world_size != saved_world) e += "wrong saved world size ";
  int64_t bad = 0;
  for (int64_t i = param_range.begin; i < param_range.end; ++i) bad += params[i] != value(0, i);
  for (int64_t i = mine.begin; i < mine.end; ++i)
    bad += (m[i - mine.begin] != value(1, i)) + (v[i - mine.begin] != value(2, i));
  if (bad) e += fmt::format("{} wrong elements ", bad);
  if (r < saved_world && res->state.rng.value("rank", -1) != r) e += "wrong rng blob ";
  if (!(res->state.data_position == data::LoaderPosition{1, want_step})) e += "wrong data position ";
  return e;
}

void reshard(int to_world) {
  const std::string root = fresh_root("to" + std::to_string(to_world));
  auto saved = run_world(4, [&](Communicator& c) { return save_world(c, root); });
  ASSERT_TRUE(saved.ok()) << saved.report();
  // Every rank wrote its own file, and the index lists all four.
  CheckpointReader reader = CheckpointReader::open(step_dir(root, 10));
  EXPECT_EQ(reader.index().files.size(), 4u);
  EXPECT_EQ(reader.index().ranks.size(), 4u);
  EXPECT_NO_THROW(reader.verify_all());
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(reader.index().files[i].ranges.at(kExpAvg), shard_range(kParamsN, 4, i));
  auto loaded = run_world(to_world, [&](Communicator& c) { return load_world(c, root, 4); });
  EXPECT_TRUE(loaded.ok()) << loaded.report();
  fs::remove_all(root);
}

}  // namespace

TEST(ckpt, reshard_4_to_2) { reshard(2); }
TEST(ckpt, reshard_4_to_3) { reshard(3); }
TEST(ckpt, reshard_4_to_1) { reshard(1); }
TEST(ckpt, reshard_4_to_4) { reshard(4); }

// A flipped byte in the last shard of the newest checkpoint: only the last
// loading rank reads that file, yet every rank falls back to the previous
// checkpoint together (the choice is collective).
TEST(ckpt, reshard_falls_back_together_when_a_shard_is_corrupt) {
  const std::string root = fresh_root("corrupt");
  auto saved = run_world(4, [&](Communicator& c) { return save_world(c, root); });
  ASSERT_TRUE(saved.ok()) << saved.report();
  {
    const std::string bad = step_dir(root, 10) + "/" + shard_file_name(3, 4);
    std::fstream f(bad, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-8, std::ios::end);
    f.put('\x7f');
  }
  auto loaded = run_world(3, [&](Communicator& c) { return load_world(c, root, 4, 5, true); });
  EXPECT_TRUE(loaded.ok()) << loaded.report();
  fs::remove_all(root);
}
