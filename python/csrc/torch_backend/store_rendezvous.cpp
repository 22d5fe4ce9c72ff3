#include "store_rendezvous.h"

#include <unistd.h>

#include <fmt/format.h>

#include "meshtrain/comm/transports/shm/shm_segment.h"  // random_job_id
#include "meshtrain/comm/world.h"

namespace meshtrain::torch_backend {

namespace {

std::vector<uint8_t> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }
std::string string_of(const std::vector<uint8_t>& b) { return {b.begin(), b.end()}; }

std::string this_host() {
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  return name;
}

// Every member's host, published in the store: the first member on another
// host than this one's, or -1 when the whole group shares it (every member
// reads the same list, so all decide alike).
int first_on_another_host(c10d::Store& store, int rank, int size, std::string& theirs) {
  const std::string mine = this_host();
  store.set(fmt::format("meshtrain/host/{}", rank), bytes_of(mine));
  for (int r = 0; r < size; ++r) {
    theirs = string_of(store.get(fmt::format("meshtrain/host/{}", r)));
    if (theirs != mine) return r;
  }
  return -1;
}

}  // namespace

comm::Communicator communicator_from_store(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                           std::chrono::milliseconds timeout) {
  comm::CommOptions opts = comm::CommOptions::from_env();
  opts.timeout_s = std::chrono::duration<double>(timeout).count();
  std::string other_host;
  const int other = first_on_another_host(*store, rank, size, other_host);
  // The whole mpirun job as the group: meshtrain's own world communicator,
  // MPI between hosts and shared memory within one (or MPI throughout when
  // MESHTRAIN_COMM_TRANSPORT=mpi).
  const comm::WorldInfo world = comm::world_from_env();
  const bool is_mpi_world = world.under_mpi() && world.size == size && world.rank == rank;
  if (is_mpi_world && (other >= 0 || opts.transport == "mpi")) return comm::Communicator::from_env(opts);
  TORCH_CHECK(other < 0,
              fmt::format("meshtrain backend: group rank {} is on host '{}' and rank {} on '{}'. Across hosts "
                          "the meshtrain backend runs the whole job launched by mpirun (torch ranks equal to "
                          "MPI ranks) over MPI; a group of some ranks on several hosts is not supported: use "
                          "gloo for it (docs/TORCH.md)", rank, this_host(), other, other_host));
  const std::string key = "meshtrain/job";
  if (rank == 0) store->set(key, bytes_of("torch_" + comm::random_job_id()));
  std::string job = string_of(store->get(key));
  // One communicator per job id, so one name serves every group.
  return comm::Communicator::create_local_named(rank, size, job, "torch", opts);
}

}  // namespace meshtrain::torch_backend
