// torch.distributed backend "meshtrain": a c10d::Backend whose collectives
// run on one meshtrain Communicator per process group (shared memory within
// a host; its algorithms chosen by the alpha-beta model, its timeouts naming
// the late peer and op, its flight recorder). Gloo's semantics are the
// contract; docs/TORCH.md lists where ours differ (AVG is supported; tags of
// send/recv are not used: a pair's messages match in order, as NCCL's do).
#pragma once
#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <mutex>

#include "meshtrain/comm/communicator.h"
#include "meshtrain_work.h"

namespace meshtrain::torch_backend {

class MeshtrainBackend final : public c10d::Backend {
 public:
  MeshtrainBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                   std::chrono::milliseconds timeout);
  ~MeshtrainBackend() override;

  const std::string getBackendName() const override { return "meshtrain"; }
  uint64_t getSequenceNumberForGroup() override { return sequence_; }
  void setSequenceNumberForGroup() override {}

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_splits,
                                               std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs, const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

  // The creator torch.distributed.Backend.register_backend calls.
  static c10::intrusive_ptr<c10d::Backend> create(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                  int size, const std::chrono::duration<float>& timeout);

 private:
  // Creates the operation's Work (completing with `outputs`), runs `launch`
  // to issue its communicator calls under the lock (so threads never
  // interleave a group's order), and hands it to the completion queue.
  template <typename Launch>
  c10::intrusive_ptr<c10d::Work> issue(c10d::OpType type, const char* title, std::vector<at::Tensor> outputs,
                                       Launch&& launch);
  // The bodies the single and coalesced forms share.
  void add_allgather(PendingOp& p, std::vector<at::Tensor>& outputs, const at::Tensor& in);
  void add_allgather_base(PendingOp& p, at::Tensor& output, const at::Tensor& input);
  void add_reduce_scatter_base(PendingOp& p, at::Tensor& output, const at::Tensor& input,
                               const c10d::ReduceOp& op);
  // Exchanges of unequal blocks as pairwise sends and receives.
  void exchange(PendingOp& p, const std::vector<at::Tensor>& sends, const std::vector<at::Tensor>& recvs);
  const std::vector<at::Tensor>& single(std::vector<at::Tensor>& ts, const char* op);
  void check_peer(int peer, const char* op) const;

  comm::Communicator comm_;
  std::mutex issue_mu_;
  uint64_t sequence_ = 0;
  CompletionQueue completions_;  // last: joined before the communicator goes
};

}  // namespace meshtrain::torch_backend
