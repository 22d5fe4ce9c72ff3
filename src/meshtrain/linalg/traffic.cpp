#include "meshtrain/linalg/traffic.h"

namespace meshtrain::linalg {

TrafficMeter::TrafficMeter(const Context& ctx) {
  for (const comm::Communicator* c : ctx.communicators()) start_[c] = c->counters();
}

Traffic TrafficMeter::since(const Context& ctx) const {
  using comm::CollOp;
  Traffic t;
  for (const comm::Communicator* c : ctx.communicators()) {
    comm::CommCounters now = c->counters();
    if (auto it = start_.find(c); it != start_.end())
      for (size_t op = 0; op < comm::kCollOpCount; ++op) {
        now.calls[op] -= it->second.calls[op];
        now.bytes[op] -= it->second.bytes[op];
      }
    const double n = c->size();
    auto bytes = [&](CollOp op) { return static_cast<double>(now.bytes_of(op)); };
    t.bytes += bytes(CollOp::Broadcast) + bytes(CollOp::Reduce) + bytes(CollOp::Send) +
               (bytes(CollOp::Allgather) + bytes(CollOp::ReduceScatter)) * (n - 1) / n +
               bytes(CollOp::Allreduce) * 2 * (n - 1) / n + bytes(CollOp::Alltoall) * (n - 1);
    for (size_t op = 0; op < comm::kCollOpCount; ++op)
      if (op != static_cast<size_t>(CollOp::Recv) && op != static_cast<size_t>(CollOp::Barrier))
        t.messages += static_cast<int64_t>(now.calls[op]);
  }
  return t;
}

}  // namespace meshtrain::linalg
