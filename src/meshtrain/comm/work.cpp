#include "meshtrain/comm/work.h"

#include "meshtrain/comm/types.h"

namespace meshtrain::comm {

void WorkState::finish(std::exception_ptr e) {
  error = std::move(e);
  done.store(true);  // seq_cst, as is the load of `waiters` after it (see wait())
  if (waiters.load() == 0) return;
  // A waiter counted itself before checking `done` under the mutex: taking
  // the mutex here means it is either before that check (and sees done) or
  // asleep in wait_for (and gets the notification).
  { std::lock_guard lock(mu); }
  cv.notify_all();
}

void Work::wait(std::chrono::milliseconds timeout) const {
  if (!state_) return;
  WorkState& s = *state_;
  // A finished operation (an inline-run collective always is) takes no lock
  // and reads no clock.
  if (!s.done.load(std::memory_order_acquire)) {
    s.waiters.fetch_add(1);
    std::unique_lock lock(s.mu);
    const bool finished = s.cv.wait_for(lock, timeout, [&] { return s.done.load(); });
    s.waiters.fetch_sub(1);
    if (!finished)
      throw CommError(fmt::format("wait for {} timed out after {} ms", s.what(), timeout.count()));
  }
  if (s.error) std::rethrow_exception(s.error);
}

bool Work::test() const { return !state_ || state_->done.load(std::memory_order_acquire); }

bool Work::started() const { return state_ && state_->started.load(std::memory_order_acquire); }

bool Work::failed() const {
  return state_ && state_->done.load(std::memory_order_acquire) && state_->error;
}

std::string Work::description() const {
  if (state_) return state_->what();
  return kind_ ? fmt::format("{} #{} (done)", kind_, seq_) : "no-op";
}

std::string OpInfo::what() const {
  if (!detail.empty()) return fmt::format("{} #{} ({})", kind, seq, detail);
  auto o = static_cast<CollOp>(op);
  std::string where;
  if (o == CollOp::Broadcast || o == CollOp::Reduce) where = fmt::format(", root {}", root);
  if (o == CollOp::Send) where = fmt::format(", to rank {}", root);
  if (o == CollOp::Recv) where = fmt::format(", from rank {}", root);
  return fmt::format("{} #{} ({} bytes, {}{}{}{}{})", kind, seq, bytes, dtype_name(static_cast<DType>(dtype)),
                     reduces ? ", " : "", reduces ? reduce_op_name(static_cast<ReduceOp>(redop)) : "",
                     algo.empty() ? "" : ", ", algo) + where;
}

void wait_all(const std::vector<Work>& works) {
  for (const auto& w : works) w.wait();
}

}  // namespace meshtrain::comm
