// test-links: mt_train
// End-to-end learning check: char-2L trained by the real trainer on the
// synthetic grammar reaches within 10% of the grammar's exact entropy rate
// (the lowest possible loss).
#include <gtest/gtest.h>

#include <filesystem>

#include "meshtrain/core/threads.h"
#include "meshtrain/data/synth_dataset.h"
#include "meshtrain/nn/gpt_spec.h"
#include "meshtrain/train/trainer.h"

using namespace meshtrain;

TEST(train, char2l_approaches_synthetic_entropy_floor) {
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
  // char-2L (2 layers, 4 heads, width 128) with a 64-token context: the
  // grammar's dependencies are short, and of the char presets this one reaches
  // the floor fastest in wall time (char-6L needed ~5 minutes for 800 steps to
  // end at 1.06x; char-4L ~50 s for 1200 steps at 1.02x; char-2L ~9 s here).
  GPTConfig cfg = gpt_preset("char-2L");
  cfg.seq_len = 64;
  opt.model = GPTSpec::make(cfg);
  opt.train_pattern = (dir / "data" / "train_*.bin").string();
  opt.val_pattern = (dir / "data" / "val_*.bin").string();
  opt.micro_batch = 8;
  // 800 steps, ~410K tokens. Calibration runs (seeds 1-5) ended at
  // 1.020-1.032x the floor; 500 steps ended at 1.05-1.08x, too close to the
  // bound. lr 3e-3 rather than 5e-3 (same final loss) keeps clear of the
  // lr at which char-2L stops learning (7e-3 plateaus at 1.13-1.16x); see
  // docs/PERFORMANCE.md, "Learning check".
  opt.steps = 800;
  opt.schedule.max_lr = 3e-3f;
  opt.schedule.warmup = 30;
  opt.schedule.total = opt.steps;
  opt.eval_every = opt.steps;
  opt.eval_batches = 40;
  opt.run_dir = (dir / "run").string();
  TrainerSummary s = run_trainer(opt);
  ASSERT_GT(s.final_val_loss, 0.f);
  // Nothing can beat the entropy rate by more than sampling noise (40
  // batches of 8 x 64 tokens: per-token log-loss sd ~1.15 nats, standard
  // error ~0.008 nats, 0.5% of the rate; 3% is ~6 sigma)...
  EXPECT_GT(s.final_val_loss, synth.entropy_nats * 0.97);
  // ...and training gets within 10% of it.
  EXPECT_LT(s.final_val_loss, synth.entropy_nats * 1.10)
      << "val loss " << s.final_val_loss << " vs entropy floor " << synth.entropy_nats;
  EXPECT_TRUE(fs::exists(s.model_path));
  fs::remove_all(dir);
}
