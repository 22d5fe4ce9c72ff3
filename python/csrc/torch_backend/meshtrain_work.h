// The c10d::Work of a meshtrain operation: its future completes when the
// communicator's operations finished and their results were delivered to
// the caller's tensors, so DDP's bucket hooks (getFuture().then) overlap the
// reduction with the rest of the backward as they do on gloo.
//
// Operations finish in issue order (one progress engine per communicator),
// so one completion thread per backend waits for them in that order. An
// operation that finished before issue returned (small collectives run on
// the caller's thread) completes at once, with no hand-off.
#pragma once
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "meshtrain/comm/work.h"

namespace meshtrain::torch_backend {

class MeshtrainWork : public c10d::Work {
 public:
  MeshtrainWork(int rank, c10d::OpType type, const char* title, std::vector<at::Tensor> outputs);
  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  std::vector<at::Tensor> result() override { return outputs_; }
  bool wait(std::chrono::milliseconds timeout) override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

  // Called once, by whoever saw the operation end.
  void complete(std::exception_ptr error);

 private:
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// One issued operation: the communicator's handles, then what delivers the
// result into the user's tensors (copies out of staging buffers).
struct PendingOp {
  std::vector<comm::Work> works;
  std::vector<std::function<void()>> deliver;
  std::vector<at::Tensor> keep_alive;  // staging buffers the works read or write
  c10::intrusive_ptr<MeshtrainWork> work;
};

class CompletionQueue {
 public:
  CompletionQueue();
  ~CompletionQueue();  // finishes every queued operation first
  // Completes `op` now if its operations already ended, else queues it.
  void submit(PendingOp op);

 private:
  static void finish(PendingOp& op);
  void run();
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<PendingOp> queue_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace meshtrain::torch_backend
