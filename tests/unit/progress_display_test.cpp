// test-links: mt_telemetry
// Whether the progress display redraws one line (\r) or prints plain lines:
// on a real pseudo-terminal it redraws; under an MPI or Slurm launcher it
// prints lines even on a terminal (they give ranks a pty whatever their own
// output is, often a file, and the \r would garble it); a pipe gets lines;
// MESHTRAIN_PROGRESS decides outright.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>

#include "meshtrain/telemetry/progress.h"

using meshtrain::ProgressDisplay;

namespace {

// A FILE* on a fresh pseudo-terminal's terminal side (null if none can be had).
std::FILE* open_pty(int& master) {
  master = posix_openpt(O_RDWR | O_NOCTTY);
  if (master < 0 || grantpt(master) != 0 || unlockpt(master) != 0) return nullptr;
  const char* name = ptsname(master);
  return name ? std::fopen(name, "w") : nullptr;
}

struct EnvGuard {
  const char* key;
  explicit EnvGuard(const char* k, const char* v) : key(k) { setenv(k, v, 1); }
  ~EnvGuard() { unsetenv(key); }
};

}  // namespace

TEST(progress_display, a_terminal_redraws_unless_an_mpi_or_slurm_launcher_runs_the_rank) {
  for (const char* k : {"MESHTRAIN_PROGRESS", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "SLURM_PROCID"})
    unsetenv(k);
  int master = -1;
  std::FILE* tty = open_pty(master);
  if (!tty) GTEST_SKIP() << "no pseudo-terminal available here (posix_openpt failed)";
  ASSERT_TRUE(isatty(fileno(tty)));
  EXPECT_TRUE(ProgressDisplay::live_by_default(tty));
  for (const char* k : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "SLURM_PROCID"}) {
    EnvGuard g(k, "2");
    EXPECT_FALSE(ProgressDisplay::live_by_default(tty)) << k;
  }
  {
    EnvGuard mpi("OMPI_COMM_WORLD_SIZE", "2");
    EnvGuard live("MESHTRAIN_PROGRESS", "live");
    EXPECT_TRUE(ProgressDisplay::live_by_default(tty));
  }
  {
    EnvGuard plain("MESHTRAIN_PROGRESS", "plain");
    EXPECT_FALSE(ProgressDisplay::live_by_default(tty));
  }
  std::fclose(tty);
  close(master);
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  std::FILE* p = fdopen(fds[1], "w");
  EXPECT_FALSE(ProgressDisplay::live_by_default(p));
  std::fclose(p);
  close(fds[0]);
}
