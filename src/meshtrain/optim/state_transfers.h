// Reads and writes of a StateFile on a thread of their own, in the order
// they were asked for, so the optimizer step of one unit runs while the next
// unit's state is read and the previous one's is written. The order is what
// makes a staging buffer safe to reuse: a read queued after the write of the
// same buffer starts only when that write is done.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>

#include "meshtrain/optim/state_file.h"

namespace meshtrain {

class StateTransfers {
 public:
  using Ticket = int64_t;
  explicit StateTransfers(const StateFile& file);
  ~StateTransfers();  // finishes what is queued
  StateTransfers(const StateTransfers&) = delete;
  StateTransfers& operator=(const StateTransfers&) = delete;

  Ticket read(int64_t offset, void* dst, int64_t bytes);
  Ticket write(int64_t offset, const void* src, int64_t bytes);
  // Blocks until transfer `t` (and every earlier one) is done; rethrows the
  // first failure (the transfers after it are dropped).
  void wait(Ticket t);
  void drain() { wait(issued()); }

  // Seconds callers spent blocked in wait: the transfers the steps did not hide.
  double wait_seconds() const { return wait_s_; }
  int64_t bytes_read() const { return bytes_read_; }
  int64_t bytes_written() const { return bytes_written_; }

 private:
  struct Job {
    bool write = false;
    int64_t offset = 0, bytes = 0;
    void* buf = nullptr;
  };
  Ticket issued() const;
  Ticket push(Job j);
  void run();

  const StateFile& file_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> queue_;
  Ticket issued_ = 0, done_ = 0;
  std::exception_ptr error_;
  bool stop_ = false;
  double wait_s_ = 0;
  int64_t bytes_read_ = 0, bytes_written_ = 0;
  std::thread thread_;
};

}  // namespace meshtrain
