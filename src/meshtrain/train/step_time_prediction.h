// A run's step time as the planner predicts it (plan/planner.h, the model
// docs/PLANNER.md validates against published runs), on this machine as
// `meshtrain plan --calibrate` measured it: `train` prints it beside the
// measured median at the end of a run, `bench train` its error.
#pragma once
#include <optional>
#include <string>

#include "meshtrain/nn/model.h"
#include "meshtrain/nn/precision.h"
#include "meshtrain/nn/recompute.h"
#include "meshtrain/plan/planner.h"

namespace meshtrain {

struct RunLayout {
  int micro_batch = 1, seq = 0, grad_accum = 1;
  int dp = 1, tp = 1, zero_stage = 0;
  int pp = 1, chunks = 1;  // pipeline stages and model chunks per rank (interleaved)
  bool sequence_parallel = false;
  Recompute recompute;
  Precision precision = Precision::FP32;
  int threads_per_rank = 1;
  int grad_wire_bytes = 4;  // the dp gradient reduction's wire format (comm.grad_dtype): 4 f32, 2 bf16
};

struct StepTimePrediction {
  plan::TimeBreakdown time;   // per step
  std::string machine;        // the calibration file used
  double step_s() const { return time.step(); }
};

// The machine file: MESHTRAIN_MACHINE_FILE, else ~/.cache/meshtrain/machine.json.
std::string default_machine_file();

// Null with `why` set when there is no calibration for this machine or the
// model is not one the planner models (LoRA).
std::optional<StepTimePrediction> predict_step_time(const ModelSpec& spec, const RunLayout& run,
                                                    std::string& why);

// The same on a given machine description.
std::optional<StepTimePrediction> predict_step_time(const ModelSpec& spec, const RunLayout& run,
                                                    const plan::ClusterSpec& machine, std::string& why);

// "predicted 0.412 s (compute 0.30 + recompute 0 + tp 0.01 + dp 0.02 + update 0.04) vs
// measured 0.430 s (-4.2%)".
std::string step_time_line(const StepTimePrediction& p, double measured_s);

}  // namespace meshtrain
