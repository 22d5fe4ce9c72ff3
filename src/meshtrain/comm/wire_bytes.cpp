#include "meshtrain/comm/wire_bytes.h"

namespace meshtrain::comm {

double bytes_sent_per_rank(CollOp op, size_t bytes, int ranks) {
  if (ranks <= 1) return 0;
  const double b = static_cast<double>(bytes), share = static_cast<double>(ranks - 1) / ranks;
  switch (op) {
    case CollOp::Allreduce: return 2 * share * b;
    case CollOp::ReduceScatter:
    case CollOp::Allgather:
    case CollOp::Broadcast:
    case CollOp::Reduce: return share * b;
    case CollOp::Alltoall: return (ranks - 1) * b;
    case CollOp::Send: return b;
    default: return 0;
  }
}

}  // namespace meshtrain::comm
