// A torch.distributed group's meshtrain communicator, found through the
// group's c10d::Store (which torchrun or init_process_group set up): group
// rank 0 picks a fresh job id, every member reads it and joins over shared
// memory. A group that is the whole job of an mpirun (torch ranks equal to
// MPI ranks) on several hosts gets meshtrain's world communicator instead:
// MPI between hosts, shared memory within each. Other groups spanning hosts
// are refused with the reason (docs/TORCH.md).
#pragma once
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>

#include "meshtrain/comm/communicator.h"

namespace meshtrain::torch_backend {

comm::Communicator communicator_from_store(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                           std::chrono::milliseconds timeout);

}  // namespace meshtrain::torch_backend
