// test-links: mt_train
// Asynchronous checkpoints whose snapshot is copied on a background thread
// (ckpt::WriterOptions::snapshot_in_background, the trainer's mode): save()
// returns before the copy, the caller's wait_for_snapshot() (the optimizer
// update's fence) waits for it, and a checkpoint saved at step k holds the
// step-k state bit for bit although training went on. The copy is delayed by
// a test hook so that an update racing it would be caught.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <thread>
#include <vector>

#include "meshtrain/ckpt/checkpoint_dir.h"
#include "meshtrain/ckpt/checkpoint_writer.h"
#include "meshtrain/ckpt/model_checkpoint.h"
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

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

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
  static State of(const GPT& model, AdamW& adam) {
    const float* p = model.params().flat.data<float>();
    const int64_t n = model.params().flat.numel();
    return {std::vector<float>(p, p + n),
            std::vector<float>(adam.exp_avg().data<float>(), adam.exp_avg().data<float>() + n),
            std::vector<float>(adam.exp_avg_sq().data<float>(), adam.exp_avg_sq().data<float>() + n)};
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
// `save_at` whose snapshot copy starts `delay_s` late; `fence` decides whether
// the update waits for it (the trainer's wiring) or not (the control).
struct SaveRun {
  State at_save, saved, final_state;
  std::vector<double> update_wait_s;  // per step after the save
};

SaveRun train_with_async_save(const std::string& root, int64_t save_at, int64_t steps, double delay_s,
                          bool fence) {
  const GPTConfig cfg = small_model();
  GPT model(cfg);
  model.init_weights(5);
  LrSchedule schedule;
  schedule.max_lr = 3e-3f;
  schedule.total = steps;
  parallel::LocalGradients sync;
  sync.attach(model);
  TrainStep stepper(model, sync, AdamWConfig{}, schedule, 1.0f);
  CheckpointOptions co;
  co.dir = root;
  co.every = save_at;
  co.async = true;
  co.snapshot_delay_s_for_testing = delay_s;
  TrainingCheckpointer checkpoints(co, nullptr, nlohmann::json::object(), ckpt::MeshShape{1, 1, 1}, 2);
  if (fence) stepper.set_before_update([&] { return checkpoints.wait_for_snapshot(); });

  const int B = 2, T = cfg.seq_len;
  std::vector<int32_t> in(B * T), tg(B * T);
  Rng rng(9);
  SaveRun run;
  for (int64_t step = 0; step < steps; ++step) {
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
    }
  }
  checkpoints.wait();
  run.final_state = State::of(model, stepper.optimizer());
  run.saved = State::load(ckpt::step_dir(root, save_at), cfg);
  return run;
}

}  // namespace

// The trainer's wiring: the update after the save waits for the delayed copy,
// and the checkpoint holds exactly the step-k state, not a later one.
TEST_F(ckpt_async, snapshot_equals_state_at_save_while_training_continues) {
  const double delay = 0.4;
  const SaveRun r = train_with_async_save(root_, /*save_at=*/3, /*steps=*/5, delay, /*fence=*/true);
  EXPECT_FALSE(r.final_state == r.at_save) << "training did not change the state after the save";
  EXPECT_TRUE(r.saved == r.at_save) << "the async checkpoint differs from the step-3 state";
  ASSERT_EQ(r.update_wait_s.size(), 2u);
  // Step 4's update waited for the copy (most of the delay); step 5's did not.
  EXPECT_GT(r.update_wait_s[0], 0.5 * delay);
  EXPECT_EQ(r.update_wait_s[1], 0.0);
}

// The control: without the fence, the delayed copy sees the updates made after
// the save, so the test above would catch an update racing the copy.
TEST_F(ckpt_async, without_the_update_fence_the_delayed_copy_sees_later_steps) {
  const SaveRun r = train_with_async_save(root_, /*save_at=*/2, /*steps=*/3, 0.4, /*fence=*/false);
  EXPECT_FALSE(r.saved == r.at_save);
  EXPECT_TRUE(r.saved == r.final_state);  // the copy ran after the last step
}

// The writer's contract: save() returns before the copy; buffers changed
// after wait_for_snapshot() leave the checkpoint alone, buffers changed before
// it end up in it.
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
  ckpt::WriterOptions o;
  o.root = root_;
  o.keep_last = 0;
  o.snapshot_in_background = true;
  o.snapshot_delay_s_for_testing = 0.3;
  ckpt::CheckpointWriter w(o, nullptr);

  req.step = 1;
  const double t0 = now_s();
  w.save(req);
  const double stall = now_s() - t0;
  EXPECT_LT(stall, 0.15) << "save() waited for the copy";
  EXPECT_GT(w.wait_for_snapshot(), 0.1);  // it waits for the delayed copy
  EXPECT_EQ(w.wait_for_snapshot(), 0.0);  // nothing pending any more
  const std::vector<float> p1 = p;
  for (float& x : p) x = -x;  // free to change now
  w.wait();
  State s1 = State::load(ckpt::step_dir(root_, 1), cfg);
  EXPECT_EQ(s1.p, p1);
  EXPECT_EQ(s1.v, v);

  req.step = 2;
  w.save(req);
  for (float& x : m) x += 1000.f;  // before wait_for_snapshot(): lands in the checkpoint
  w.wait();
  const State s2 = State::load(ckpt::step_dir(root_, 2), cfg);
  EXPECT_EQ(s2.m, m);
  EXPECT_EQ(s2.p, p);
  const auto stats = w.stats();
  ASSERT_EQ(stats.size(), 2u);
  EXPECT_GT(stats[0].copy_s, 0.0);
  EXPECT_LT(stats[0].stall_s, 0.15);

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
