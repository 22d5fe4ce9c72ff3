#include "meshtrain/telemetry/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

namespace meshtrain {

// A terminal, unless an MPI or Slurm launcher runs this rank: they hand ranks
// a pseudo-terminal of their own whatever their own output is (often a file),
// where \r and escape codes would garble the log.
bool ProgressDisplay::live_by_default(FILE* out) {
  if (const char* e = std::getenv("MESHTRAIN_PROGRESS"); e && *e) return std::strcmp(e, "live") == 0;
  for (const char* k : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "SLURM_PROCID"})
    if (const char* v = std::getenv(k); v && *v) return false;
  return isatty(fileno(out)) != 0;
}

ProgressDisplay::ProgressDisplay(FILE* out, int plain_every)
    : out_(out), interactive_(live_by_default(out)), plain_every_(std::max(1, plain_every)) {}

std::string ProgressDisplay::format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "--";
  int64_t t = static_cast<int64_t>(s + 0.5);
  if (t >= 3600) return fmt::format("{}h{:02}m", t / 3600, (t % 3600) / 60);
  if (t >= 60) return fmt::format("{}m{:02}s", t / 60, t % 60);
  return fmt::format("{}s", t);
}

std::string ProgressDisplay::render(const ProgressState& s, int bar_width) {
  const double frac = s.total_steps > 0 ? static_cast<double>(s.step) / s.total_steps : 0.0;
  std::string bar;
  if (bar_width > 0) {
    int filled = static_cast<int>(frac * bar_width + 0.5);
    // Appended, not "[" + std::string&&: GCC 12 warns falsely (-Wrestrict) on that.
    bar.reserve(static_cast<size_t>(bar_width) + 3);
    bar += '[';
    bar.append(static_cast<size_t>(filled), '#').append(static_cast<size_t>(bar_width - filled), '.');
    bar += "] ";
  }
  const double eta = s.step > 0 ? s.elapsed_s / s.step * (s.total_steps - s.step) : -1;
  std::string val = s.val_loss >= 0 ? fmt::format("{:.4f}", s.val_loss) : "-";
  std::string extra;
  if (s.mfu >= 0) extra += fmt::format(" | MFU {:.1f}%", 100.0 * s.mfu);
  if (s.comm_total_s >= 0)
    extra += fmt::format(" | comm {:.1f}/{:.1f} ms exposed", std::max(0.0, s.comm_exposed_s) * 1e3,
                         s.comm_total_s * 1e3);
  if (s.grad_wire_bytes >= 0 && s.grad_dense_bytes > 0)
    extra += fmt::format(" | grads sent {} ({:.1f}x less)",
                         s.grad_wire_bytes < 1e6 ? fmt::format("{:.1f} kB", s.grad_wire_bytes / 1e3)
                                                 : fmt::format("{:.2f} MB", s.grad_wire_bytes / 1e6),
                         s.grad_dense_bytes / std::max(1.0, s.grad_wire_bytes));
  if (s.straggler_rank >= 0)
    extra += fmt::format(" | slowest r{} +{:.1f} ms", s.straggler_rank, s.straggler_lag_s * 1e3);
  return fmt::format("{}step {}/{} | loss {:.4f} | val {} | lr {:.2e} | gnorm {:.2f} | {:.0f} {} | "
                     "{:.0f} ms/step{} | ETA {}",
                     bar, s.step, s.total_steps, s.loss, val, s.lr, s.grad_norm, s.tokens_per_s,
                     s.rate_unit, s.step_s * 1e3, extra, format_duration(eta));
}

void ProgressDisplay::update(const ProgressState& s) {
  if (interactive_) {
    fmt::print(out_, "\r\033[K{}", render(s, 20));
    line_open_ = true;
  } else if (s.step % plain_every_ == 0 || s.step == s.total_steps || s.step == 1) {
    fmt::print(out_, "{}\n", render(s, 0));
  }
  std::fflush(out_);
}

void ProgressDisplay::note(const std::string& line) {
  if (line_open_) fmt::print(out_, "\r\033[K");
  fmt::print(out_, "{}\n", line);
  line_open_ = false;
  std::fflush(out_);
}

void ProgressDisplay::finish() {
  if (line_open_) fmt::print(out_, "\n");
  line_open_ = false;
  std::fflush(out_);
}

}  // namespace meshtrain
