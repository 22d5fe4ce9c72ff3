// An ordered lane of work for a communicator: jobs run one at a time, in the
// order they were submitted, on a thread of the lane's own (started on first
// use). A job may instead run on the caller while the lane is idle
// (try_run_inline: small collectives, no thread hand-off on the latency path).
//
// A communicator has one engine for its collectives and one per (peer,
// direction) for point-to-point, so a pipeline's send never waits behind a
// collective and a receive never waits behind a send.
#pragma once
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace meshtrain::comm {

template <class Job>
class ProgressEngine {
 public:
  explicit ProgressEngine(std::function<void(Job&)> run) : run_(std::move(run)) {}
  ProgressEngine(const ProgressEngine&) = delete;
  ProgressEngine& operator=(const ProgressEngine&) = delete;
  // Runs what is queued, then stops the thread.
  ~ProgressEngine() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  // Queues `job` for the lane's thread, or throws with nothing queued (the thread is started
  // first, and push_back leaves the queue as it was when it throws), so a
  // caller can take back what it did to issue the job.
  void submit(Job job) {
    std::unique_lock lock(mu_);
    if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
    queue_.push_back(std::move(job));
    lock.unlock();
    cv_.notify_all();
  }

  // Runs `job` on the caller when the lane is idle (nothing queued, nothing
  // running) and returns true; otherwise leaves it to the caller to submit.
  bool try_run_inline(Job& job) {
    std::unique_lock lock(mu_);
    if (!queue_.empty() || busy_) return false;
    run_unlocked(lock, job);
    return true;
  }

  // Blocks until every job submitted so far has run.
  void drain() {
    std::unique_lock lock(mu_);
    ++draining_;
    cv_.wait(lock, [&] { return queue_.empty() && !busy_; });
    --draining_;
  }

 private:
  void loop() {
    std::unique_lock lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return (stop_ && queue_.empty()) || (!queue_.empty() && !busy_); });
      if (queue_.empty()) return;
      Job job = std::move(queue_.front());
      queue_.pop_front();
      run_unlocked(lock, job);
    }
  }

  // Runs `job` with the lock released, the lane marked busy meanwhile. A job
  // that throws (a communicator turns errors into its Work; only running out
  // of memory escapes) still leaves the lane idle, not busy for good.
  void run_unlocked(std::unique_lock<std::mutex>& lock, Job& job) {
    busy_ = true;
    lock.unlock();
    try {
      run_(job);
    } catch (...) {
      lock.lock();
      now_idle();
      throw;
    }
    lock.lock();
    now_idle();
  }

  void now_idle() {
    busy_ = false;
    // Only a queued job (for the lane's thread) or drain() waits for this;
    // an inline small collective with neither skips the notification.
    if (!queue_.empty() || draining_ > 0) cv_.notify_all();
  }

  std::function<void(Job&)> run_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> queue_;
  bool busy_ = false;
  bool stop_ = false;
  int draining_ = 0;  // threads in drain()
  std::thread thread_;
};

}  // namespace meshtrain::comm
