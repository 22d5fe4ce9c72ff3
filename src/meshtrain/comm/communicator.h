// Communicator: the one way ranks talk. Every collective is asynchronous and
// returns a Work; a progress engine (one thread per communicator) runs them
// in issue order, so callers overlap compute with communication. Small
// collectives issued while the engine is idle run directly on the caller.
//
//   auto comm = comm::Communicator::from_env();          // MESHTRAIN_RANK, ...
//   Work w = comm.allreduce(grads + off, n, DType::F32, ReduceOp::Avg);
//   ... more backward ...
//   w.wait();
//
// Count conventions (balanced blocks: block_of(count, size, rank)):
//   allreduce      send, recv: count elements (recv == send is in place)
//   reduce_scatter send: count elements; recv: block_of(count, size, rank).count
//   allgather      send: this rank's block of count; recv: count elements
//   broadcast      buf: count elements; root's data is sent to everyone
//   reduce         send: count; recv (root only): count
//   alltoall       send, recv: size * count; block p goes to / came from rank p
//   send, recv     count elements to / from `peer`
// Every rank must issue the same collectives in the same order with the same
// dtype, count and root (MESHTRAIN_COMM_DEBUG=1 checks this before each one).
#pragma once
#include <array>
#include <memory>
#include <string>

#include "meshtrain/comm/cost_model.h"
#include "meshtrain/comm/options.h"
#include "meshtrain/comm/shared_buffer.h"
#include "meshtrain/comm/types.h"
#include "meshtrain/comm/work.h"
#include "meshtrain/comm/world.h"
#include "meshtrain/core/tensor.h"

namespace meshtrain::comm {

struct CommImpl;

// What a rank issued on one communicator, per operation kind: calls, and
// bytes in the count convention above (allreduce: the buffer; allgather and
// reduce_scatter: the whole gathered buffer; send/recv: the message).
struct CommCounters {
  std::array<uint64_t, kCollOpCount> calls{}, bytes{};
  uint64_t calls_of(CollOp op) const { return calls[static_cast<size_t>(op)]; }
  uint64_t bytes_of(CollOp op) const { return bytes[static_cast<size_t>(op)]; }
};

class Communicator {
 public:
  Communicator() = default;  // not a member of any group (split with color < 0)

  // The world communicator of this process, from the launcher's, mpirun's
  // or Slurm's environment; a lone process is rank 0 of 1.
  static Communicator from_env(const CommOptions& opts = CommOptions::from_env());
  // Explicit world over the shm transport: `size` processes of this machine
  // that share `job_id` (tests and tools).
  static Communicator create_local(int rank, int size, const std::string& job_id,
                                   const CommOptions& opts = CommOptions::from_env());
  // The same under a name every member gives alike: groups made apart from
  // a world (torch.distributed's, one per group), whose members may have
  // made different numbers of communicators before.
  static Communicator create_local_named(int rank, int size, const std::string& job_id,
                                         const std::string& name, const CommOptions& opts);

  bool valid() const { return impl_ != nullptr; }
  int rank() const;
  int size() const;
  std::string_view transport() const;  // "shm" or "mpi"
  // This rank's node (real, or emulated with comm.node_size): the unit of the
  // two-level algorithms and of buddy checkpoint copies.
  int node_id() const;
  const std::string& name() const;

  // Collective: ranks with the same color form a new communicator, ordered
  // by key (then old rank). color < 0 returns an invalid communicator.
  Communicator split(int color, int key) const;
  // The same, the new group's operations timing out after `timeout_s`
  // instead of this one's (the doctor's per-link communicators).
  Communicator split(int color, int key, double timeout_s) const;

  Work allreduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op = ReduceOp::Sum);
  Work allreduce(void* buf, size_t count, DType dtype, ReduceOp op = ReduceOp::Sum) {
    return allreduce(buf, buf, count, dtype, op);
  }
  Work allreduce(const Tensor& t, ReduceOp op = ReduceOp::Sum) {
    return allreduce(t.raw(), t.raw(), static_cast<size_t>(t.numel()), t.dtype(), op);
  }
  Work reduce_scatter(const void* send, void* recv, size_t count, DType dtype, ReduceOp op = ReduceOp::Sum);
  // reduce_scatter and allgather take the TOTAL count (the size of the full
  // buffer); rank r's block is block_of(count, size, r).
  Work allgather(const void* send, void* recv, size_t count, DType dtype);
  Work broadcast(void* buf, size_t count, DType dtype, int root);
  Work broadcast(const Tensor& t, int root) {
    return broadcast(t.raw(), static_cast<size_t>(t.numel()), t.dtype(), root);
  }
  Work reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op, int root);
  Work alltoall(const void* send, void* recv, size_t count, DType dtype);
  Work barrier();
  Work send(const void* buf, size_t count, DType dtype, int peer);
  Work recv(void* buf, size_t count, DType dtype, int peer);

  // Blocking allreduce of one value (loss, grad-norm², overflow flags).
  double allreduce_scalar(double value, ReduceOp op = ReduceOp::Sum);
  int64_t allreduce_scalar(int64_t value, ReduceOp op = ReduceOp::Sum);

  // Collective and blocking: `bytes` of memory every peer maps, so in-place
  // collectives on it need no copy into the transport's scratch.
  SharedBuffer alloc_shared(size_t bytes);

  // Pin an algorithm for an op on this rank ("" or "auto": cost model).
  // Must be the same on every rank.
  void set_algorithm(CollOp op, const std::string& name);
  // The algorithm a call of this op and size would use.
  std::string algorithm_for(CollOp op, size_t bytes) const;
  const CostModel& cost_model() const;
  const CommOptions& options() const;

  // Waits for every operation issued so far.
  void synchronize();
  // Operations issued so far on this communicator (not its splits); exact
  // when one thread issues at a time, as collectives require.
  CommCounters counters() const;
  // The last operations of this rank and where the peers are.
  std::string flight_record() const;

 private:
  explicit Communicator(std::shared_ptr<CommImpl> impl) : impl_(std::move(impl)) {}
  Work submit(const CollArgs& args);
  friend struct CommImpl;
  std::shared_ptr<CommImpl> impl_;
};

}  // namespace meshtrain::comm
