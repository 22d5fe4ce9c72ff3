// The training progress display: one live line on a terminal (redrawn in
// place), or plain periodic lines when output goes to a file or pipe.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>

namespace meshtrain {

struct ProgressState {
  int64_t step = 0, total_steps = 0;
  float loss = 0.f;
  float val_loss = -1.f;  // < 0: not evaluated yet
  float lr = 0.f;
  double grad_norm = 0.0;
  double tokens_per_s = 0.0;  // the rate shown, in rate_unit
  const char* rate_unit = "tok/s";  // "samples/s" for a model of dense samples (images)
  double step_s = 0.0;
  double elapsed_s = 0.0;
  // Optional telemetry (shown only when set): MFU in [0, 1], communication
  // the step waited for / all communication, and the slowest rank's lag.
  double mfu = -1.0;
  double comm_exposed_s = -1.0, comm_total_s = -1.0;
  int straggler_rank = -1;
  double straggler_lag_s = 0.0;
  // Compressed gradients: bytes a rank sent this step, and the f32 equivalent.
  double grad_wire_bytes = -1.0, grad_dense_bytes = -1.0;
};

class ProgressDisplay {
 public:
  // interactive: redraw one line with \r: stdout is a terminal and no MPI or
  // Slurm launcher runs the rank (theirs hand ranks a terminal even when the
  // job's output goes to a file); MESHTRAIN_PROGRESS=live|plain decides outright.
  explicit ProgressDisplay(FILE* out = stdout, int plain_every = 10);
  // Whether a display on `out` redraws one line (see interactive_ below).
  static bool live_by_default(FILE* out);
  void update(const ProgressState& s);
  // A permanent line (validation result, message) that does not get overwritten.
  void note(const std::string& line);
  void finish();
  static std::string format_duration(double seconds);
  static std::string render(const ProgressState& s, int bar_width);

 private:
  FILE* out_;
  bool interactive_;
  int plain_every_;
  bool line_open_ = false;
};

}  // namespace meshtrain
