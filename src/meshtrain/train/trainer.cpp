#include "meshtrain/train/trainer.h"

#include "meshtrain/train/training_run.h"

namespace meshtrain {

TrainerSummary run_trainer(const TrainerOptions& opt) {
  TrainingRun run(opt);
  run.resume();
  run.loop();
  return run.finish();
}

}  // namespace meshtrain
