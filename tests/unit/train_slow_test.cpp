// test-links: mt_train
// End-to-end learning check: char-6L trained on the synthetic grammar reaches
// within 10% of the grammar's exact entropy rate (the lowest possible loss).
#include <gtest/gtest.h>

#include <filesystem>

#include "meshtrain/core/threads.h"
#include "meshtrain/data/synth_dataset.h"
#include "meshtrain/nn/gpt_spec.h"
#include "meshtrain/train/trainer.h"

using namespace meshtrain;

TEST(train, char6l_approaches_synthetic_entropy_floor) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / "meshtrain_train_slow_test";
  fs::remove_all(dir);
  data::SynthOptions so;
  so.out_dir = (dir / "data").string();
  so.tokens = 1'000'000;
  so.val_tokens = 50'000;
  auto synth = data::write_synth_dataset(so);

  set_thread_count(2);
  TrainerOptions opt;
  // char-6L's architecture with a 64-token context: the grammar's dependencies
  // are short, and the shorter context keeps the test within a few minutes.
  GPTConfig cfg = gpt_preset("char-6L");
  cfg.seq_len = 64;
  opt.model = GPTSpec::make(cfg);
  opt.train_pattern = (dir / "data" / "train_*.bin").string();
  opt.val_pattern = (dir / "data" / "val_*.bin").string();
  opt.micro_batch = 8;
  // ~410K tokens. Calibration runs (seeds 1 and 2) were at 1.10-1.12x the
  // floor after 300 steps and still falling; see docs/PERFORMANCE.md.
  opt.steps = 800;
  opt.schedule.max_lr = 1.5e-3f;
  opt.schedule.warmup = 30;
  opt.schedule.total = opt.steps;
  opt.eval_every = opt.steps;
  opt.eval_batches = 40;
  opt.run_dir = (dir / "run").string();
  TrainerSummary s = run_trainer(opt);
  ASSERT_GT(s.final_val_loss, 0.f);
  // Nothing can beat the entropy rate by more than sampling noise...
  EXPECT_GT(s.final_val_loss, synth.entropy_nats * 0.97);
  // ...and training gets within 10% of it.
  EXPECT_LT(s.final_val_loss, synth.entropy_nats * 1.10)
      << "val loss " << s.final_val_loss << " vs entropy floor " << synth.entropy_nats;
  EXPECT_TRUE(fs::exists(s.model_path));
  fs::remove_all(dir);
}
