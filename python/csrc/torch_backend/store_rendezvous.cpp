#include "store_rendezvous.h"

#include <unistd.h>

#include <fmt/format.h>

#include "meshtrain/comm/transports/shm/shm_segment.h"  // random_job_id

namespace meshtrain::torch_backend {

namespace {

std::vector<uint8_t> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }
std::string string_of(const std::vector<uint8_t>& b) { return {b.begin(), b.end()}; }

std::string this_host() {
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  return name;
}

// Every member's host; a group spanning hosts is refused by every member.
void check_one_host(c10d::Store& store, int rank, int size) {
  std::string mine = this_host();
  store.set(fmt::format("meshtrain/host/{}", rank), bytes_of(mine));
  for (int r = 0; r < size; ++r) {
    std::string theirs = string_of(store.get(fmt::format("meshtrain/host/{}", r)));
    TORCH_CHECK(theirs == mine,
                fmt::format("meshtrain backend: group rank {} is on host '{}' and rank {} on '{}'; the "
                            "meshtrain backend moves tensors over shared memory between ranks of one "
                            "host. Across hosts use gloo (or \"cpu:gloo\") for now (docs/TORCH.md)",
                            rank, mine, r, theirs));
  }
}

}  // namespace

comm::Communicator communicator_from_store(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                           std::chrono::milliseconds timeout) {
  check_one_host(*store, rank, size);
  const std::string key = "meshtrain/job";
  if (rank == 0) store->set(key, bytes_of("torch_" + comm::random_job_id()));
  std::string job = string_of(store->get(key));
  comm::CommOptions opts = comm::CommOptions::from_env();
  opts.timeout_s = std::chrono::duration<double>(timeout).count();
  // One communicator per job id, so one name serves every group.
  return comm::Communicator::create_local_named(rank, size, job, "torch", opts);
}

}  // namespace meshtrain::torch_backend
