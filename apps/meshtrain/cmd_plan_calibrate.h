// `meshtrain plan --calibrate` (cmd_plan_calibrate.cpp).
#pragma once
#include <string>

namespace meshtrain::cli {

struct CalibrateOptions {
  int ranks = 2;        // the rank count the calibration is for (threads split among them)
  int threads = 0;      // per rank; 0: the cores / ranks
  std::string out;      // empty: the default machine file (train/step_time_prediction.h)
  std::string reference = "char-6L";  // the model of the reference step
  int batch = 8;
};

void run_plan_calibrate(const CalibrateOptions& o);

}  // namespace meshtrain::cli
