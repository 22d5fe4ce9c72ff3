// Makes items 0, 1, 2, ... (from a start index) on one background thread,
// keeping at most `depth` finished items ready, so the consumer rarely waits.
// An exception thrown by the producer is re-thrown by next() in the consumer,
// in order (items made before it are still delivered first), and again by
// every later call. The destructor
// stops and joins the thread, also while the producer is mid-item or the
// queue is full. depth 0 means no thread: next() produces in the caller.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include "meshtrain/core/error.h"

namespace meshtrain::data {

template <typename T>
class Prefetcher {
 public:
  using Produce = std::function<T(int64_t index)>;

  Prefetcher(Produce produce, int64_t first_index, int depth)
      : produce_(std::move(produce)), next_index_(first_index), depth_(depth) {
    MT_CHECK(depth >= 0, "prefetch depth must be >= 0, got {}", depth);
    if (depth_ > 0) worker_ = std::thread([this] { run(); });
  }

  ~Prefetcher() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    space_.notify_all();
    if (worker_.joinable()) worker_.join();
  }

  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  T next() {
    if (depth_ == 0) {  // a failed item is retried (and fails again) on the next call
      T value = produce_(next_index_);
      ++next_index_;
      return value;
    }
    std::unique_lock<std::mutex> lock(mu_);
    ready_.wait(lock, [this] { return !queue_.empty(); });
    // A failure stays at the head of the queue: every later call re-throws it
    // instead of waiting for a producer that has stopped.
    if (queue_.front().error) std::rethrow_exception(queue_.front().error);
    T value = std::move(*queue_.front().value);
    queue_.pop_front();
    lock.unlock();
    space_.notify_one();
    return value;
  }

  // Items finished and waiting (for tests and telemetry).
  size_t ready_count() const {
    std::lock_guard<std::mutex> lock(mu_);
    return queue_.size();
  }

 private:
  struct Item {
    std::optional<T> value;
    std::exception_ptr error;
  };

  void run() {
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        space_.wait(lock, [this] { return stop_ || queue_.size() < static_cast<size_t>(depth_); });
        if (stop_) return;
      }
      Item item;
      try {
        item.value.emplace(produce_(next_index_++));
      } catch (...) {
        item.error = std::current_exception();
      }
      const bool failed = item.error != nullptr;
      {
        std::lock_guard<std::mutex> lock(mu_);
        queue_.push_back(std::move(item));
      }
      ready_.notify_one();
      if (failed) return;  // the consumer sees the error; nothing after it is valid
    }
  }

  Produce produce_;
  int64_t next_index_;  // touched only by the producing thread
  int depth_;
  mutable std::mutex mu_;
  std::condition_variable ready_, space_;
  std::deque<Item> queue_;
  bool stop_ = false;
  std::thread worker_;
};

}  // namespace meshtrain::data
