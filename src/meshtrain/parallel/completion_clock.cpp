#include "meshtrain/parallel/completion_clock.h"

#include <chrono>

namespace meshtrain::parallel {

double steady_now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

CompletionClock::CompletionClock() : thread_([this] { loop(); }) {}

CompletionClock::~CompletionClock() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void CompletionClock::reset() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return done_.size() == watched_; });
  done_.clear();
  watched_ = 0;
}

void CompletionClock::watch(comm::Work work) {
  {
    std::lock_guard lock(mu_);
    pending_.push_back(std::move(work));
    ++watched_;
  }
  cv_.notify_all();
}

std::vector<double> CompletionClock::stamps() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return done_.size() == watched_; });
  return done_;
}

void CompletionClock::loop() {
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !pending_.empty(); });
    if (pending_.empty()) return;
    comm::Work w = std::move(pending_.front());
    pending_.pop_front();
    lock.unlock();
    try {
      w.wait();
    } catch (...) {
      // The owner's own wait() reports the error.
    }
    const double t = steady_now_s();
    lock.lock();
    done_.push_back(t);
    cv_.notify_all();
  }
}

}  // namespace meshtrain::parallel
