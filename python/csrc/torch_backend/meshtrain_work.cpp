#include "meshtrain_work.h"

#include <c10/util/Exception.h>

#include "meshtrain/core/error.h"

namespace meshtrain::torch_backend {

MeshtrainWork::MeshtrainWork(int rank, c10d::OpType type, const char* title, std::vector<at::Tensor> outputs)
    : c10d::Work(rank, type, title),
      outputs_(std::move(outputs)),
      future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {}

bool MeshtrainWork::isCompleted() { return future_->completed(); }

bool MeshtrainWork::isSuccess() const { return future_->completed() && !future_->hasError(); }

std::exception_ptr MeshtrainWork::exception() const {
  return future_->completed() && future_->hasError() ? future_->exception_ptr() : nullptr;
}

bool MeshtrainWork::wait(std::chrono::milliseconds /*timeout: each operation keeps the group's own*/) {
  future_->wait();
  if (future_->hasError()) std::rethrow_exception(future_->exception_ptr());
  return true;
}

void MeshtrainWork::complete(std::exception_ptr error) {
  if (error)
    future_->setError(error);
  else
    future_->markCompleted(c10::IValue(outputs_));
}

namespace {

// torch.distributed raises DistBackendError for a failed collective; keep
// meshtrain's message (the op, its sequence number, the late peer).
std::exception_ptr as_torch_error(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const c10::Error&) {
    return e;
  } catch (const std::exception& err) {
    try {
      C10_THROW_ERROR(DistBackendError, std::string("meshtrain backend: ") + err.what());
    } catch (...) {
      return std::current_exception();
    }
  }
}

bool all_done(const PendingOp& op) {
  for (const comm::Work& w : op.works)
    if (!w.test()) return false;
  return true;
}

}  // namespace

void CompletionQueue::finish(PendingOp& op) {
  std::exception_ptr error;
  try {
    comm::wait_all(op.works);
    for (auto& d : op.deliver) d();
  } catch (...) {
    error = as_torch_error(std::current_exception());
  }
  op.work->complete(error);
}

CompletionQueue::CompletionQueue() : thread_([this] { run(); }) {}

CompletionQueue::~CompletionQueue() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_one();
  thread_.join();
}

void CompletionQueue::submit(PendingOp op) {
  std::unique_lock<std::mutex> lock(mu_);
  // Only with nothing queued: futures then complete in issue order (an
  // operation that ran inline needed an idle engine, so this is the case).
  // Finished outside the lock: a future's callbacks may issue more work.
  if (queue_.empty() && all_done(op)) {
    lock.unlock();
    finish(op);
    return;
  }
  queue_.push_back(std::move(op));
  lock.unlock();
  cv_.notify_one();
}

void CompletionQueue::run() {
  for (;;) {
    PendingOp op;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      op = std::move(queue_.front());
      queue_.pop_front();
    }
    finish(op);
  }
}

}  // namespace meshtrain::torch_backend
