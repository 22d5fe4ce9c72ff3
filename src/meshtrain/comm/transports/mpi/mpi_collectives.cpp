// The MPI transport's native collectives (algorithm "mpi"): the MPI library's own collectives (non-blocking forms,
// polled against the deadline). The reference we benchmark against, and the
// fallback across nodes.
#include <climits>
#include <cstring>
#include <vector>

#include "meshtrain/comm/transports/mpi/mpi_transport.h"

namespace meshtrain::comm {

bool MpiTransport::native_supports(CollOp op) const {
  return op != CollOp::Send && op != CollOp::Recv;
}

void MpiTransport::run_native(const CollArgs& a, const OpContext& ctx) {
  MPI_Comm comm = comm_;
  const int n = size_, r = rank_;
  MT_CHECK(a.count <= static_cast<size_t>(INT_MAX), "{}: count {} too large for MPI", ctx.what(), a.count);
  const int count = static_cast<int>(a.count);
  MPI_Datatype dt = mpi::datatype(a.dtype);
  MPI_Op op = mpi::reduce_op(a.redop, a.dtype);
  const void* send = a.send == a.recv ? MPI_IN_PLACE : a.send;
  MPI_Request req = MPI_REQUEST_NULL;
  std::vector<int> counts, displs;
  auto blocks = [&] {
    for (int p = 0; p < n; ++p) {
      Block b = block_of(a.count, n, p);
      counts.push_back(static_cast<int>(b.count));
      displs.push_back(static_cast<int>(b.offset));
    }
  };
  {
    auto lock = mpi::guard();
    switch (a.op) {
      case CollOp::Allreduce:
        MPI_Iallreduce(send, a.recv, count, dt, op, comm, &req);
        break;
      case CollOp::Broadcast:
        if (r == a.root && a.send && a.send != a.recv && a.bytes()) std::memcpy(a.recv, a.send, a.bytes());
        MPI_Ibcast(a.recv, count, dt, a.root, comm, &req);
        break;
      case CollOp::Reduce:
        MPI_Ireduce(r == a.root ? send : a.send, a.recv, count, dt, op, a.root, comm, &req);
        break;
      case CollOp::ReduceScatter:
        blocks();
        MPI_Ireduce_scatter(a.send, a.recv, counts.data(), dt, op, comm, &req);
        break;
      case CollOp::Allgather: {
        blocks();
        Block mine = block_of(a.count, n, r);
        const void* s = a.send == static_cast<const char*>(a.recv) + mine.offset * dtype_size(a.dtype)
                            ? MPI_IN_PLACE : a.send;
        MPI_Iallgatherv(s, counts[r], dt, a.recv, counts.data(), displs.data(), dt, comm, &req);
        break;
      }
      case CollOp::Alltoall:
        MPI_Ialltoall(a.send, count, dt, a.recv, count, dt, comm, &req);
        break;
      case CollOp::Barrier:
        MPI_Ibarrier(comm, &req);
        break;
      default:
        fail("algorithm 'mpi' cannot run {}", coll_op_name(a.op));
    }
  }
  mpi::wait(req, ctx);
}

}  // namespace meshtrain::comm
