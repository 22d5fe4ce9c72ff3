// Work: the handle an asynchronous collective returns. The operation runs on
// the communicator's progress engine; wait() blocks until it finished and
// rethrows its error (a CommError naming the op, its sequence number, bytes
// and the missing peer). test() never blocks and never throws.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace meshtrain::comm {

// What an operation is, kept as fields and formatted only on demand (the
// flight recorder keeps a copy of it per entry).
struct OpInfo {
  uint64_t seq = 0;
  const char* kind = "";     // "allreduce", "split", ...
  std::string detail;        // set for rare ops (split, alloc_shared)
  size_t bytes = 0;
  uint8_t dtype = 0, redop = 0, op = 0;
  bool reduces = false;
  int root = -1;             // root or peer, -1 when none
  std::string_view algo;     // static algorithm name
  std::string what() const;  // "allreduce #5 (4096 bytes, F32, sum, direct)"
};

struct WorkState {
  // `done` is an atomic so a finished operation's wait() and test() take no
  // lock; the mutex and condition variable serve only a waiter that has to
  // sleep (`waiters` tells finish() whether one may).
  std::atomic<bool> done{false};
  // Set by the progress engine's thread as it begins the operation (before
  // it waits for any peer): lets a caller tell "already running beside me"
  // from "still queued" without a clock.
  std::atomic<bool> started{false};
  std::atomic<int> waiters{0};
  std::mutex mu;
  std::condition_variable cv;
  std::exception_ptr error;  // written before `done`, read after it
  OpInfo info;
  uint64_t seq() const { return info.seq; }
  std::string what() const { return info.what(); }

  void finish(std::exception_ptr e = nullptr);
};

class Work {
 public:
  Work() = default;  // an already completed no-op
  explicit Work(std::shared_ptr<WorkState> s) : state_(std::move(s)) {}
  // An operation that already finished without error (`kind` a static name).
  static Work completed(uint64_t seq, const char* kind) {
    Work w;
    w.seq_ = seq;
    w.kind_ = kind;
    return w;
  }

  // Blocks until done; rethrows the operation's error. Throws CommError if
  // the timeout passes first (the operation itself keeps its own timeout).
  void wait(std::chrono::milliseconds timeout = std::chrono::hours(24 * 365)) const;
  // True once finished (successfully or not).
  bool test() const;
  // True when finished with an error (the error itself comes from wait()).
  bool failed() const;
  // True once a progress engine's thread has begun running the operation
  // (it may still be running). False while it is queued, and for an
  // operation that ran inline on the caller's thread (CommOptions::
  // inline_bytes; it returned already complete: see test()). Never blocks.
  bool started() const;
  uint64_t sequence_number() const { return state_ ? state_->seq() : seq_; }
  // What the operation is (kind, bytes, algorithm); null for one that
  // completed inline without keeping a state.
  const OpInfo* info() const { return state_ ? &state_->info : nullptr; }
  std::string description() const;

 private:
  std::shared_ptr<WorkState> state_;
  uint64_t seq_ = 0;           // completed(): no state kept
  const char* kind_ = nullptr;
};

// Waits for every handle, in order; rethrows the first error.
void wait_all(const std::vector<Work>& works);

}  // namespace meshtrain::comm
