// Transport over MPI point-to-point (Isend/Irecv polled against the
// deadline, so a dead peer is a clear error, not a hang), plus the helpers
// the native `mpi` algorithm and world set-up need. Built only with MPI.
#pragma once
// The C API only: OpenMPI and MPICH would otherwise pull in their C++ bindings.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <memory>
#include <mutex>
#include <string>

#include "meshtrain/comm/transport.h"

namespace meshtrain::comm {

namespace mpi {
void init_once();  // MPI_Init_thread, MPI_Finalize at exit
int world_rank();
int world_size();
std::string broadcast_job_id(const std::string& mine);  // rank 0's wins
int host_id();              // world rank of the first rank on this host
bool all_on_one_host();
MPI_Comm dup_world();
// Serialises MPI calls when the library lacks MPI_THREAD_MULTIPLE.
std::unique_lock<std::mutex> guard();
MPI_Datatype datatype(DType t);
MPI_Op reduce_op(ReduceOp op, DType t);
// Polls `req` until done; throws CommError naming `peer` at the deadline.
void wait(MPI_Request& req, const OpContext& ctx, int peer = -1);
// MPI_Abort on the world when MPI is initialized and not finalized (else
// returns): every rank of the job ends, and mpirun/srun report it.
void abort_job(int exit_code);
}  // namespace mpi

class MpiTransport final : public Transport {
 public:
  explicit MpiTransport(MPI_Comm comm);  // takes ownership
  // A lane over the same communicator whose messages carry their own tag
  // (point-to-point: never matched against a collective's messages).
  MpiTransport(MPI_Comm comm, int tag, bool owns);
  ~MpiTransport() override;
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string_view kind() const override { return "mpi"; }
  void exchange(std::span<const SendSpec> sends, std::span<const RecvSpec> recvs,
                const OpContext& ctx) override;
  void barrier(const OpContext& ctx) override;
  void allgather_small(const void* mine, size_t bytes, void* all, const OpContext& ctx) override;
  // Collective over this communicator; nullptr for color < 0.
  std::unique_ptr<Transport> split(int color, int key) override;
  std::string_view native_algorithm() const override { return "mpi"; }
  bool native_supports(CollOp op) const override;
  void run_native(const CollArgs& args, const OpContext& ctx) override;  // mpi_collectives.cpp
  Transport* p2p_lane() override;
  MPI_Comm comm() const { return comm_; }

 private:
  MPI_Comm comm_;
  int tag_ = 0;
  bool owns_ = true;
  int rank_ = 0, size_ = 1;
  std::unique_ptr<MpiTransport> p2p_;
};

}  // namespace meshtrain::comm
