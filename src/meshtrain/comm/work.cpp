#include "meshtrain/comm/work.h"

#include "meshtrain/comm/types.h"

namespace meshtrain::comm {

void WorkState::finish(std::exception_ptr e) {
  {
    std::lock_guard lock(mu);
    done = true;
    error = std::move(e);
  }
  cv.notify_all();
}

void Work::wait(std::chrono::milliseconds timeout) const {
  if (!state_) return;
  std::unique_lock lock(state_->mu);
  // wait_for reads the clock even when the work is done; an inline-run
  // collective always is, and that read was 3% of a small allreduce.
  if (!state_->done && !state_->cv.wait_for(lock, timeout, [&] { return state_->done; }))
    throw CommError(fmt::format("wait for {} timed out after {} ms", state_->what(), timeout.count()));
  if (state_->error) std::rethrow_exception(state_->error);
}

bool Work::test() const {
  if (!state_) return true;
  std::lock_guard lock(state_->mu);
  return state_->done;
}

bool Work::failed() const {
  if (!state_) return false;
  std::lock_guard lock(state_->mu);
  return state_->done && state_->error;
}

std::string Work::description() const { return state_ ? state_->what() : "no-op"; }

std::string WorkState::what() const {
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
