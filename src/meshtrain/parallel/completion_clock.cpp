#include "meshtrain/parallel/completion_clock.h"

#include <algorithm>
#include <chrono>

#include "meshtrain/telemetry/trace_writer.h"

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

void CompletionClock::watch(comm::Work work, TraceLabel label) {
  {
    std::lock_guard lock(mu_);
    pending_.emplace_back(std::move(work), std::move(label));
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
    auto [w, label] = std::move(pending_.front());
    pending_.pop_front();
    lock.unlock();
    try {
      w.wait();
    } catch (...) {
      // The owner's own wait() reports the error.
    }
    const double t = steady_now_s();
    trace(label, t);
    lock.lock();
    done_.push_back(t);
    cv_.notify_all();
  }
}

void CompletionClock::trace(const TraceLabel& label, double done_s) {
  telemetry::Tracer* tracer = telemetry::global_tracer();
  if (label.name.empty() || !tracer || !tracer->enabled()) return;
  // Only this thread appends to done_ between reset()s, so reading it unlocked is safe.
  const double prev = done_.empty() ? 0.0 : done_.back();
  const double begin_s = std::max(label.launched_s, prev);
  // Steady-clock seconds to the trace clock (system µs), offset taken now.
  const double offset_us = telemetry::Tracer::now_us() - steady_now_s() * 1e6;
  if (tracer != named_for_) {
    tracer->set_thread_name("comm progress");
    named_for_ = tracer;
  }
  tracer->complete(label.name, "comm", begin_s * 1e6 + offset_us, (done_s - begin_s) * 1e6,
                   label.args);
}

}  // namespace meshtrain::parallel
