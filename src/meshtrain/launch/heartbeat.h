// Heartbeats through shared memory, so the launcher can tell a rank that is
// training from one that stopped making progress (hung in a kernel, stopped,
// stuck outside any collective). The launcher creates one small segment per
// job (`/mt-<job>-hb`: one cache line per rank) and names it to the ranks in
// MESHTRAIN_HEARTBEAT; each rank's trainer calls heartbeat_step() once per
// step, which bumps the rank's counter and time stamp (a few nanoseconds).
//
// A rank is judged only after its first beat: startup (building the model,
// loading a checkpoint, the first rendezvous) takes as long as it takes and is
// never mistaken for a hang (an optional, separate startup timeout covers a
// rank that never reaches its first step). Long phases inside training
// (checkpoint writes and loads) call heartbeat_pulse() as they progress.
// Without MESHTRAIN_HEARTBEAT (mpirun, a process started by hand) every call
// is a no-op.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

namespace meshtrain::launch {

inline constexpr const char* kEnvHeartbeat = "MESHTRAIN_HEARTBEAT";
// Attempt number of an elastic job (0 = first start), set by the launcher.
inline constexpr const char* kEnvRestartCount = "MESHTRAIN_RESTART_COUNT";

// One rank's slot: 64 bytes, so ranks never share a cache line.
struct alignas(64) HeartbeatSlot {
  std::atomic<uint64_t> beats;     // steps begun (0 = not training yet)
  std::atomic<uint64_t> stamp_ns;  // CLOCK_MONOTONIC of the last beat or pulse
  std::atomic<int64_t> step;       // the step of the last beat
  std::atomic<int64_t> pid;
};
static_assert(sizeof(HeartbeatSlot) == 64, "one cache line per rank");

// Monotonic nanoseconds, comparable between processes of one machine.
uint64_t monotonic_ns();

// ------------------------------------------------------------ launcher side

// The board a launcher creates before starting ranks and reads while they run.
class HeartbeatBoard {
 public:
  // Creates /mt-<job>-hb with `ranks` zeroed slots (removed by the destructor).
  HeartbeatBoard(const std::string& job_id, int ranks);
  ~HeartbeatBoard();
  HeartbeatBoard(const HeartbeatBoard&) = delete;
  HeartbeatBoard& operator=(const HeartbeatBoard&) = delete;

  const std::string& name() const;  // the value of MESHTRAIN_HEARTBEAT
  int ranks() const;

  struct Reading {
    uint64_t beats = 0;    // 0: the rank has not begun a step yet
    double age_s = 0;      // seconds since the last beat or pulse (when beats > 0)
    int64_t step = 0;
  };
  Reading read(int rank) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// --------------------------------------------------------------- rank side

// Called by the trainer at the start of every step (`step` = 0-based index).
// Also the test hook MESHTRAIN_TEST_KILL_AT_STEP="RANK:STEP": on the first
// attempt (MESHTRAIN_RESTART_COUNT unset or 0) rank RANK sends itself SIGKILL
// as it begins step STEP (1-based, as printed), a real crash at a chosen point;
// MESHTRAIN_TEST_HANG_AT_STEP="RANK:STEP" likewise stops it with SIGSTOP (a
// hang: alive, no progress).
void heartbeat_step(int64_t step);

// Progress inside a long phase (a checkpoint write or load): refreshes the
// time stamp without counting a step.
void heartbeat_pulse();

// This process's attempt number (MESHTRAIN_RESTART_COUNT; 0 when unset).
int restart_count();

}  // namespace meshtrain::launch
