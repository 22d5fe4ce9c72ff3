// Work: the handle an asynchronous collective returns. The operation runs on
// the communicator's progress engine; wait() blocks until it finished and
// rethrows its error (a CommError naming the op, its sequence number, bytes
// and the missing peer). test() never blocks and never throws.
#pragma once
#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace meshtrain::comm {

struct WorkState {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::exception_ptr error;
  uint64_t seq = 0;
  // What the operation is, kept as fields and formatted only on demand.
  const char* kind = "";     // "allreduce", "split", ...
  std::string detail;        // set for rare ops (split, alloc_shared)
  size_t bytes = 0;
  uint8_t dtype = 0, redop = 0, op = 0;
  bool reduces = false;
  int root = -1;             // root or peer, -1 when none
  std::string_view algo;     // static algorithm name
  std::string what() const;  // "allreduce #5 (4096 bytes, F32, sum, direct)"

  void finish(std::exception_ptr e = nullptr);
};

class Work {
 public:
  Work() = default;  // an already completed no-op
  explicit Work(std::shared_ptr<WorkState> s) : state_(std::move(s)) {}

  // Blocks until done; rethrows the operation's error. Throws CommError if
  // the timeout passes first (the operation itself keeps its own timeout).
  void wait(std::chrono::milliseconds timeout = std::chrono::hours(24 * 365)) const;
  // True once finished (successfully or not).
  bool test() const;
  // True when finished with an error (the error itself comes from wait()).
  bool failed() const;
  uint64_t sequence_number() const { return state_ ? state_->seq : 0; }
  std::string description() const;

 private:
  std::shared_ptr<WorkState> state_;
};

// Waits for every handle, in order; rethrows the first error.
void wait_all(const std::vector<Work>& works);

}  // namespace meshtrain::comm
