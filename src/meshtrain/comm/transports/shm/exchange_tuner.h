// How a rank writes the data its peers will read (its copy of the input and
// its reduced slice, in the direct algorithm's scratch): with ordinary
// stores, so peers pull the lines from this core's cache, or with streaming
// stores, so the lines go to memory and peers read them from there.
//
// Which is faster depends on where the VM's vCPUs sit at the moment: when
// they share a cache, cache-to-cache pulls win (2-rank allreduce at 1-8 MiB:
// 20-25 GB/s against 15-16); when they do not, each pulled line is a remote
// cache miss and a core gets ~8.5 GB/s, while the memory path still gives
// 15-16 (docs/PERFORMANCE.md). Measured on the same VM minutes apart, so the
// choice is made online: per message-size class, time both ways and keep the
// faster, exploring the other every kExploreEvery operations. Results are
// bit-identical either way, and ranks need not agree (each fences its own
// streaming stores before publishing); they converge because an operation's
// duration, bounded by its barriers, is nearly the same on every rank.
#pragma once
#include <cstddef>
#include <cstdint>

namespace meshtrain::comm {

enum class ExchangeMode : uint8_t { Cache = 0, Stream = 1 };

// The collectives that tune their exchange mode separately (each moves data
// its own way, so each measures its own sizes).
enum class ExchangeUse : uint8_t { Allreduce, SharedAllreduce, Allgather, Broadcast, ReduceScatter, Count };

class ExchangeTuner {
 public:
  // MESHTRAIN_SHM_EXCHANGE = auto (default) | cache | stream.
  ExchangeTuner();
  // The mode for the next operation of `bytes` (counts it).
  ExchangeMode choose(size_t bytes);
  // The mode measured faster so far for `bytes` (counts nothing).
  ExchangeMode preferred(size_t bytes) const;
  // Reports how long an operation of `bytes` took in `mode` (cycle counter).
  void record(ExchangeMode mode, size_t bytes, uint64_t cycles);
  static uint64_t now();

  static constexpr int kExploreEvery = 32;
  static constexpr uint32_t kTrials = 6;  // 3 measured runs of each way per size
  // Smaller messages stay in cache mode: they live in L2 and are latency-bound.
  static constexpr size_t kMinBytes = 256 * 1024;

 private:
  struct Arm {
    double cycles_per_byte = 0;  // moving average; 0 = not measured yet
  };
  struct Class {
    Arm arm[2];
    uint32_t ops = 0;
    ExchangeMode best = ExchangeMode::Cache;
  };
  static constexpr int kClasses = 48;  // log2 of the message size
  static int class_of(size_t bytes);

  bool forced_ = false;
  ExchangeMode forced_mode_ = ExchangeMode::Cache;
  Class classes_[kClasses];
};

// One operation's use of a tuner: picks the mode when constructed, reports
// the operation's duration on done() (not on an exception: a failed
// operation's time says nothing). A null tuner means ordinary stores, untimed.
class ExchangeScope {
 public:
  ExchangeScope(ExchangeTuner* tuner, size_t bytes)
      : tuner_(tuner), bytes_(bytes), started_(ExchangeTuner::now()),
        mode_(tuner ? tuner->choose(bytes) : ExchangeMode::Cache) {}
  bool stream() const { return mode_ == ExchangeMode::Stream; }
  void done() {
    if (tuner_) tuner_->record(mode_, bytes_, ExchangeTuner::now() - started_);
  }

 private:
  ExchangeTuner* tuner_;
  size_t bytes_;
  uint64_t started_;
  ExchangeMode mode_;
};

}  // namespace meshtrain::comm
