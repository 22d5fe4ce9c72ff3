#include "meshtrain/optim/state_transfers.h"

#include <chrono>

namespace meshtrain {

StateTransfers::StateTransfers(const StateFile& file) : file_(file), thread_([this] { run(); }) {}

StateTransfers::~StateTransfers() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

StateTransfers::Ticket StateTransfers::issued() const {
  std::lock_guard<std::mutex> lk(mu_);
  return issued_;
}

StateTransfers::Ticket StateTransfers::read(int64_t offset, void* dst, int64_t bytes) {
  bytes_read_ += bytes;
  return push({false, offset, bytes, dst});
}

StateTransfers::Ticket StateTransfers::write(int64_t offset, const void* src, int64_t bytes) {
  bytes_written_ += bytes;
  return push({true, offset, bytes, const_cast<void*>(src)});
}

StateTransfers::Ticket StateTransfers::push(Job j) {
  Ticket t;
  {
    std::lock_guard<std::mutex> lk(mu_);
    queue_.push_back(j);
    t = ++issued_;
  }
  cv_.notify_all();
  return t;
}

void StateTransfers::wait(Ticket t) {
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait(lk, [&] { return done_ >= t; });
  wait_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (error_) std::rethrow_exception(error_);
}

void StateTransfers::run() {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, nothing left
    const Job j = queue_.front();
    queue_.pop_front();
    const bool skip = error_ != nullptr;
    lk.unlock();
    std::exception_ptr err;
    if (!skip) {
      try {
        if (j.write) file_.write(j.offset, j.buf, j.bytes);
        else file_.read(j.offset, j.buf, j.bytes);
      } catch (...) {
        err = std::current_exception();
      }
    }
    lk.lock();
    if (err && !error_) error_ = err;
    ++done_;
    cv_.notify_all();
  }
}

}  // namespace meshtrain
