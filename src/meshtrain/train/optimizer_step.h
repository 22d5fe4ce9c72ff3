// One optimizer step of a GPT on one process: forward/backward over the
// micro-batches of a step (gradient accumulation), global-norm clipping, AdamW.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "meshtrain/nn/gpt.h"
#include "meshtrain/optim/adamw.h"
#include "meshtrain/optim/lr_schedule.h"

namespace meshtrain {

// Weight decay on matrices and embeddings (2-D), none on biases and LayerNorm.
std::vector<ParamSegment> gpt_param_segments(const GPTParams& params);

struct MicroBatch {
  const int32_t* inputs;
  const int32_t* targets;
  int B, T;
};

struct StepStats {
  float loss = 0.f;        // mean over micro-batches
  double grad_norm = 0.0;  // before clipping
  float lr = 0.f;
  bool finite = true;      // false: loss or gradients had inf/NaN; the update was skipped
  double forward_s = 0, backward_s = 0, optimizer_s = 0;
};

class OptimizerStep {
 public:
  OptimizerStep(GPT& model, AdamWConfig adam, LrSchedule schedule, float clip);
  // Runs forward/backward for each micro-batch and then the update for `step`
  // (0-based, drives the schedule).
  StepStats run(const std::vector<MicroBatch>& micro, int64_t step);
  AdamW& optimizer() { return *opt_; }
  const LrSchedule& schedule() const { return schedule_; }

 private:
  GPT& model_;
  std::unique_ptr<AdamW> opt_;
  LrSchedule schedule_;
  float clip_;
};

}  // namespace meshtrain
