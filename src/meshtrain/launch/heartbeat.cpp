#include "meshtrain/launch/heartbeat.h"

#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

#include "meshtrain/comm/transports/shm/shm_segment.h"
#include "meshtrain/comm/world.h"
#include "meshtrain/core/error.h"

namespace meshtrain::launch {

uint64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

namespace {

HeartbeatSlot* slots_of(const comm::ShmSegment& seg) {
  return static_cast<HeartbeatSlot*>(seg.data());
}

int env_int(const char* name, int fallback) {
  const char* s = std::getenv(name);
  return s && *s ? std::atoi(s) : fallback;
}

// "RANK:STEP" from a test-hook variable, honoured on the first attempt only.
void test_hook(const char* name, int& rank, int64_t& step) {
  const char* k = std::getenv(name);
  long long r = -1, s = -1;
  if (k && *k && restart_count() == 0 && std::sscanf(k, "%lld:%lld", &r, &s) == 2) {
    rank = static_cast<int>(r);
    step = s;
  }
}

// This rank's slot, found once from the environment (nullptr: not watched).
struct RankBeat {
  comm::ShmSegment segment;
  HeartbeatSlot* slot = nullptr;
  int rank = 0;
  int kill_rank = -1;       // MESHTRAIN_TEST_KILL_AT_STEP
  int64_t kill_step = -1;
  int hang_rank = -1;       // MESHTRAIN_TEST_HANG_AT_STEP
  int64_t hang_step = -1;

  RankBeat() {
    rank = env_int(comm::kEnvRank, 0);
    test_hook("MESHTRAIN_TEST_KILL_AT_STEP", kill_rank, kill_step);
    test_hook("MESHTRAIN_TEST_HANG_AT_STEP", hang_rank, hang_step);
    const char* name = std::getenv(kEnvHeartbeat);
    if (!name || !*name) return;
    try {
      segment = comm::ShmSegment::open(name, std::chrono::steady_clock::now() + std::chrono::seconds(2));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "warning: rank %d: no heartbeats (%s)\n", rank, e.what());
      return;
    }
    const size_t n = segment.bytes() / sizeof(HeartbeatSlot);
    if (rank < 0 || static_cast<size_t>(rank) >= n) {
      std::fprintf(stderr, "warning: rank %d: heartbeat board %s has only %zu slots\n", rank, name, n);
      return;
    }
    slot = slots_of(segment) + rank;
    slot->pid.store(::getpid(), std::memory_order_relaxed);
  }
};

RankBeat& rank_beat() {
  static RankBeat beat;
  return beat;
}

}  // namespace

int restart_count() { return env_int(kEnvRestartCount, 0); }

void heartbeat_step(int64_t step) {
  RankBeat& b = rank_beat();
  if (b.kill_step >= 0 && b.rank == b.kill_rank && step + 1 == b.kill_step) {
    std::fprintf(stderr, "MESHTRAIN_TEST_KILL_AT_STEP: rank %d sends itself SIGKILL at step %lld\n",
                 b.rank, static_cast<long long>(step + 1));
    std::fflush(nullptr);
    ::kill(::getpid(), SIGKILL);
  }
  if (b.hang_step >= 0 && b.rank == b.hang_rank && step + 1 == b.hang_step) {
    std::fprintf(stderr, "MESHTRAIN_TEST_HANG_AT_STEP: rank %d stops itself (SIGSTOP) at step %lld\n",
                 b.rank, static_cast<long long>(step + 1));
    std::fflush(nullptr);
    ::kill(::getpid(), SIGSTOP);
  }
  if (!b.slot) return;
  b.slot->step.store(step, std::memory_order_relaxed);
  b.slot->stamp_ns.store(monotonic_ns(), std::memory_order_relaxed);
  b.slot->beats.fetch_add(1, std::memory_order_release);
}

void heartbeat_pulse() {
  RankBeat& b = rank_beat();
  if (b.slot) b.slot->stamp_ns.store(monotonic_ns(), std::memory_order_release);
}

// ------------------------------------------------------------ launcher side

struct HeartbeatBoard::Impl {
  comm::ShmSegment segment;
  int ranks = 0;
};

HeartbeatBoard::HeartbeatBoard(const std::string& job_id, int ranks) : impl_(std::make_unique<Impl>()) {
  MT_CHECK(ranks >= 1, "heartbeat board for {} ranks", ranks);
  impl_->ranks = ranks;
  impl_->segment = comm::ShmSegment::create(comm::shm_name(job_id, "hb"),
                                            sizeof(HeartbeatSlot) * static_cast<size_t>(ranks));
  // create() zero-fills; construct the atomics in place all the same.
  for (int r = 0; r < ranks; ++r) new (slots_of(impl_->segment) + r) HeartbeatSlot{};
}

HeartbeatBoard::~HeartbeatBoard() = default;  // the segment unlinks itself

const std::string& HeartbeatBoard::name() const { return impl_->segment.name(); }
int HeartbeatBoard::ranks() const { return impl_->ranks; }

HeartbeatBoard::Reading HeartbeatBoard::read(int rank) const {
  MT_CHECK(rank >= 0 && rank < impl_->ranks, "heartbeat of rank {} of {}", rank, impl_->ranks);
  const HeartbeatSlot& s = slots_of(impl_->segment)[rank];
  Reading r;
  r.beats = s.beats.load(std::memory_order_acquire);
  r.step = s.step.load(std::memory_order_relaxed);
  const uint64_t stamp = s.stamp_ns.load(std::memory_order_acquire);
  const uint64_t now = monotonic_ns();
  r.age_s = r.beats > 0 && now > stamp ? static_cast<double>(now - stamp) * 1e-9 : 0.0;
  return r;
}

}  // namespace meshtrain::launch
