// test-links: mt_train
// Asynchronous checkpoints whose snapshot is copied on a background thread
// (ckpt::WriterOptions::snapshot_in_background, the trainer's mode): save()
// returns before the copy, the caller's wait_for_snapshot() (the optimizer
// update's fence) waits for it, the write follows the copy, and a checkpoint
// saved at step k holds the step-k state bit for bit although training went
// on. The tests assert the order of events, not how long anything took: the
// writer reports each stage of a save (WriterOptions::on_stage_for_testing),
// and the test holds the copy back at its start until the caller blocks in
// wait_for_snapshot() (or the test lets it go), so an update racing the copy
// is caught whatever the machine's load.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "meshtrain/ckpt/checkpoint_dir.h"
#include "meshtrain/ckpt/checkpoint_writer.h"
#include "meshtrain/ckpt/model_checkpoint.h"
#include "meshtrain/optim/adamw.h"
#include "meshtrain/nn/gpt.h"
#include "meshtrain/parallel/gradient_sync.h"
#include "meshtrain/ckpt/resume.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/rng.h"
#include "meshtrain/train/train_step.h"
#include "meshtrain/train/training_checkpoints.h"

using namespace meshtrain;
namespace fs = std::filesystem;

namespace {

// Events from any thread, in the order they happened ("save returned 1",
// "copy done 1", "write begin 1", "update 4", ...).
class EventLog {
 public:
  void add(const std::string& e) {
    std::lock_guard lock(mu_);
    events_.push_back(e);
  }
  void add(ckpt::SaveStage s, int64_t step) {
    static const char* const names[] = {"copy begin", "copy done", "write begin", "write done",
                                        "snapshot wait"};
    add(std::string(names[static_cast<int>(s)]) + " " + std::to_string(step));
  }
  // Position of `e` in the log; the log's size (after everything) when absent.
  size_t at(const std::string& e) const {
    std::lock_guard lock(mu_);
    return static_cast<size_t>(std::find(events_.begin(), events_.end(), e) - events_.begin());
  }
  bool has(const std::string& e) const {
    std::lock_guard lock(mu_);
    return std::find(events_.begin(), events_.end(), e) != events_.end();
  }
  std::string dump() const {
    std::lock_guard lock(mu_);
    std::string s;
    for (const auto& e : events_) s += "\n  " + e;
    return s;
  }

 private:
  mutable std::mutex mu_;
  std::vector<std::string> events_;
};

// Holds the snapshot thread at a copy's start until the test opens it. The
// 60 s limit is only a hang guard (a save() that waited for the copy itself
// would otherwise block for good); passing it is a failure.
class Gate {
 public:
  void open() {
    {
      std::lock_guard lock(mu_);
      open_ = true;
    }
    cv_.notify_all();
  }
  void close() {
    std::lock_guard lock(mu_);
    open_ = false;
  }
  void pass() {
    std::unique_lock lock(mu_);
    if (!cv_.wait_for(lock, std::chrono::seconds(60), [&] { return open_; })) {
      hung_ = true;  // hang guard: let the save finish so the test can report it
      open_ = true;
    }
  }
  bool hung() const {
    std::lock_guard lock(mu_);
    return hung_;
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false, hung_ = false;
};

GPTConfig small_model() {
  GPTConfig cfg = gpt_preset("tiny");
  cfg.vocab_size = 256;
  cfg.padded_vocab = pad_vocab(256);
  return cfg;
}

class ckpt_async : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    root_ = (fs::temp_directory_path() /
             ("meshtrain_ckpt_async_" + std::to_string(::getpid()) + "_" + info->name())).string();
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  std::string root_;
};

// The parameters and both AdamW moments at one moment, and as a checkpoint holds them.
struct State {
  std::vector<float> p, m, v;
  static State of(const GPT& model, Optimizer& adam) {
    const float* p = model.params().flat.data<float>();
    const int64_t n = model.params().flat.numel();
    auto named = [&](const std::string& name) {
      for (const OptimizerState& s : adam.state())
        if (s.name == name) return std::vector<float>(s.tensor->data<float>(), s.tensor->data<float>() + n);
      ADD_FAILURE() << "no optimizer state " << name;
      return std::vector<float>();
    };
    return {std::vector<float>(p, p + n), named("exp_avg"), named("exp_avg_sq")};
  }
  static State load(const std::string& step_dir, const GPTConfig& cfg) {
    const int64_t n = cfg.num_params();
    State s{std::vector<float>(n), std::vector<float>(n), std::vector<float>(n)};
    ckpt::load_checkpoint(step_dir, {{ckpt::kParams, {0, n}, s.p.data()},
                                     {ckpt::kExpAvg, {0, n}, s.m.data()},
                                     {ckpt::kExpAvgSq, {0, n}, s.v.data()}});
    return s;
  }
  bool operator==(const State& o) const {
    auto same = [](const std::vector<float>& a, const std::vector<float>& b) {
      return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
    };
    return same(p, o.p) && same(m, o.m) && same(v, o.v);
  }
};

// Trains a tiny GPT as the trainer does, with an async checkpoint at step
// `save_at` whose snapshot copy is held back until someone waits for it
// (wait_for_snapshot() blocking: SaveStage::SnapshotWait) or the last step is
// done. With `fence` (the trainer's wiring) the update after the save waits
// for the copy, so the copy goes on then; without (the control), or with a
// fence that did not wait, it goes on only after the last step.
struct SaveRun {
  State at_save, saved, final_state;
  std::vector<double> update_wait_s;  // per step after the save
  EventLog events;
  bool hung = false;
};

void train_with_async_save(SaveRun& run, const std::string& root, int64_t save_at, int64_t steps,
                           bool fence) {
  const GPTConfig cfg = small_model();
  GPT model(cfg);
  model.init_weights(5);
  LrSchedule schedule;
  schedule.max_lr = 3e-3f;
  schedule.total = steps;
  parallel::LocalGradients sync;
  sync.attach(model);
  TrainStep stepper(model, sync, OptimizerConfig{}, schedule, 1.0f);
  Gate copy_gate;
  CheckpointOptions co;
  co.dir = root;
  co.every = save_at;
  co.async = true;
  co.on_save_stage_for_testing = [&](ckpt::SaveStage s, int64_t step) {
    run.events.add(s, step);
    if (s == ckpt::SaveStage::CopyBegin) copy_gate.pass();
    if (s == ckpt::SaveStage::SnapshotWait) copy_gate.open();
  };
  TrainingCheckpointer checkpoints(co, nullptr, nlohmann::json::object(), ckpt::MeshShape{1, 1, 1}, 2);
  int64_t step = 0;
  if (fence)
    stepper.set_before_update([&] {
      const double waited = checkpoints.wait_for_snapshot();
      run.events.add("update " + std::to_string(step + 1));
      return waited;
    });

  const int B = 2, T = cfg.seq_len;
  std::vector<int32_t> in(B * T), tg(B * T);
  Rng rng(9);
  for (; step < steps; ++step) {
    for (int i = 0; i < B * T; ++i) {
      in[i] = static_cast<int32_t>(rng.next_u64() % 256);
      tg[i] = static_cast<int32_t>(rng.next_u64() % 256);
    }
    const StepStats st = stepper.run({{in.data(), tg.data(), B, T}}, step);
    if (step >= save_at) run.update_wait_s.push_back(st.update_wait_s);
    if (checkpoints.due(step + 1)) {
      EXPECT_EQ(step + 1, save_at) << "one save per run";
      run.at_save = State::of(model, stepper.optimizer());
      checkpoints.save(step + 1, model, stepper.optimizer(), {0, step + 1});
      run.events.add("save returned " + std::to_string(step + 1));
    }
  }
  copy_gate.open();
  checkpoints.wait();
  run.hung = copy_gate.hung();
  run.final_state = State::of(model, stepper.optimizer());
  run.saved = State::load(ckpt::step_dir(root, save_at), cfg);
}

}  // namespace

// The trainer's wiring: the update after the save waits for the held-back
// copy, and the checkpoint holds exactly the step-k state, not a later one.
TEST_F(ckpt_async, snapshot_equals_state_at_save_while_training_continues) {
  SaveRun r;
  train_with_async_save(r, root_, /*save_at=*/3, /*steps=*/5, /*fence=*/true);
  ASSERT_FALSE(r.hung) << "hang guard: the copy was held 60 s (a save() that copied itself?)"
                       << r.events.dump();
  EXPECT_FALSE(r.final_state == r.at_save) << "training did not change the state after the save";
  EXPECT_TRUE(r.saved == r.at_save) << "the async checkpoint differs from the step-3 state";
  // save() returned with the copy still held; step 4's fence waited for the
  // copy and its update began only once the copy was done; the write came
  // after the copy.
  EXPECT_LT(r.events.at("save returned 3"), r.events.at("copy done 3")) << r.events.dump();
  EXPECT_LT(r.events.at("snapshot wait 3"), r.events.at("copy done 3")) << r.events.dump();
  EXPECT_LT(r.events.at("copy done 3"), r.events.at("update 4")) << r.events.dump();
  EXPECT_LT(r.events.at("copy done 3"), r.events.at("write begin 3")) << r.events.dump();
  EXPECT_TRUE(r.events.has("write done 3")) << r.events.dump();
  ASSERT_EQ(r.update_wait_s.size(), 2u);
  // Step 5's fence found nothing pending (its early return reports exactly 0).
  EXPECT_EQ(r.update_wait_s[1], 0.0);
}

// The control: without the update fence, the copy (let go after the last
// step) sees the updates made after the save, so the test above would catch
// an update racing the copy.
TEST_F(ckpt_async, without_the_update_fence_the_delayed_copy_sees_later_steps) {
  SaveRun r;
  train_with_async_save(r, root_, /*save_at=*/2, /*steps=*/3, /*fence=*/false);
  ASSERT_FALSE(r.hung) << r.events.dump();
  EXPECT_FALSE(r.saved == r.at_save);
  EXPECT_TRUE(r.saved == r.final_state);  // the copy ran after the last step
}

// The writer's contract: save() returns before the copy; wait_for_snapshot()
// returns after it; the write follows the copy; buffers changed after
// wait_for_snapshot() leave the checkpoint alone, buffers changed before it
// (while the copy is held back) end up in it.
TEST_F(ckpt_async, writer_copies_after_save_returns_and_until_wait_for_snapshot) {
  const GPTConfig cfg = small_model();
  const int64_t n = cfg.num_params();
  std::vector<float> p(n), m(n), v(n);
  std::iota(p.begin(), p.end(), 0.f);
  std::iota(m.begin(), m.end(), 1.f);
  std::iota(v.begin(), v.end(), 2.f);
  ckpt::SaveRequest req;
  req.model = GPTSpec::make(cfg)->to_json();
  req.buffers = {{ckpt::kParams, DType::F32, n, p.data(), {0, n}},
                 {ckpt::kExpAvg, DType::F32, n, m.data(), {0, n}},
                 {ckpt::kExpAvgSq, DType::F32, n, v.data(), {0, n}}};
  EventLog events;
  Gate copy_gate;
  ckpt::WriterOptions o;
  o.root = root_;
  o.keep_last = 0;
  o.snapshot_in_background = true;
  // The copy is held at its start until wait_for_snapshot() blocks for it.
  o.on_stage_for_testing = [&](ckpt::SaveStage s, int64_t step) {
    events.add(s, step);
    if (s == ckpt::SaveStage::CopyBegin) copy_gate.pass();
    if (s == ckpt::SaveStage::SnapshotWait) copy_gate.open();
  };
  ckpt::CheckpointWriter w(o, nullptr);

  req.step = 1;
  w.save(req);  // returns with the copy held back (a save() that copied itself would hang here)
  events.add("save returned 1");
  w.wait_for_snapshot();  // waits for the copy
  events.add("snapshot waited 1");
  EXPECT_EQ(w.wait_for_snapshot(), 0.0);  // nothing pending any more
  const std::vector<float> p1 = p;
  for (float& x : p) x = -x;  // free to change now
  copy_gate.open();  // (already open unless wait_for_snapshot() failed to wait)
  w.wait();
  events.add("wait returned 1");
  State s1 = State::load(ckpt::step_dir(root_, 1), cfg);
  EXPECT_EQ(s1.p, p1);
  EXPECT_EQ(s1.v, v);
  ASSERT_FALSE(copy_gate.hung()) << "hang guard: save() waited for the copy" << events.dump();
  EXPECT_LT(events.at("save returned 1"), events.at("snapshot wait 1")) << events.dump();
  EXPECT_LT(events.at("snapshot wait 1"), events.at("copy done 1")) << events.dump();
  EXPECT_LT(events.at("copy done 1"), events.at("snapshot waited 1")) << events.dump();
  EXPECT_LT(events.at("copy done 1"), events.at("write begin 1")) << events.dump();
  EXPECT_LT(events.at("write begin 1"), events.at("write done 1")) << events.dump();
  EXPECT_LT(events.at("write done 1"), events.at("wait returned 1")) << events.dump();

  copy_gate.close();
  req.step = 2;
  w.save(req);
  for (float& x : m) x += 1000.f;  // before the copy is let go: lands in the checkpoint
  w.wait_for_snapshot();
  copy_gate.open();
  w.wait();
  const State s2 = State::load(ckpt::step_dir(root_, 2), cfg);
  EXPECT_EQ(s2.m, m);
  EXPECT_EQ(s2.p, p);
  EXPECT_FALSE(copy_gate.hung()) << events.dump();
  const auto stats = w.stats();
  ASSERT_EQ(stats.size(), 2u);
  EXPECT_GT(stats[0].copy_s, 0.0);  // the copy was timed (on the snapshot thread)

  // snapshot_in_background without async saves is refused.
  ckpt::WriterOptions bad = o;
  bad.async = false;
  EXPECT_THROW(ckpt::CheckpointWriter(bad, nullptr), Error);
}

// A background failure (here the write: the checkpoint root became a file) is
// re-thrown by wait() and by the next save(); wait_for_snapshot() never throws.
TEST_F(ckpt_async, background_errors_are_rethrown_by_wait_and_next_save) {
  const GPTConfig cfg = small_model();
  const int64_t n = cfg.num_params();
  std::vector<float> p(n, 1.f);
  ckpt::SaveRequest req;
  req.model = GPTSpec::make(cfg)->to_json();
  req.buffers = {{ckpt::kParams, DType::F32, n, p.data(), {0, n}}};
  const std::string root = root_ + "/ckpt";
  ckpt::WriterOptions o;
  o.root = root;
  o.snapshot_in_background = true;
  ckpt::CheckpointWriter w(o, nullptr);
  fs::remove_all(root);
  std::ofstream(root) << "not a directory";
  req.step = 1;
  w.save(req);
  EXPECT_NO_THROW(w.wait_for_snapshot());
  // The background write's failure surfaces as a meshtrain::Error naming
  // the checkpoint root that could not be written.
  auto names_root = [&](const Error& e) {
    EXPECT_NE(std::string(e.what()).find(root), std::string::npos) << e.what();
  };
  try {
    w.wait();
    ADD_FAILURE() << "wait() did not re-throw the background error";
  } catch (const Error& e) {
    names_root(e);
  }
  req.step = 2;
  w.save(req);
  w.wait_for_snapshot();
  // Let the write fail, then the next save() reports it.
  for (int i = 0; i < 200 && w.stats().empty(); ++i) {
    try {
      req.step = 3 + i;
      w.save(req);
    } catch (const Error& e) {
      names_root(e);
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ADD_FAILURE() << "save() never re-threw the background error";
}
