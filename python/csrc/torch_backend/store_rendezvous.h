// A torch.distributed group's meshtrain communicator, found through the
// group's c10d::Store (which torchrun or init_process_group set up): group
// rank 0 picks a fresh job id, every member reads it and joins over shared
// memory. Members on different hosts are refused with the reason: the
// shared-memory transport serves one host (docs/TORCH.md).
#pragma once
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>

#include "meshtrain/comm/communicator.h"

namespace meshtrain::torch_backend {

comm::Communicator communicator_from_store(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                           std::chrono::milliseconds timeout);

}  // namespace meshtrain::torch_backend
