// Transports by name. Each backend folder registers a factory in the table
// (transport_registry.cpp); the communicator's bootstrap asks for "shm" or
// "mpi" here instead of naming concrete classes, and a backend a build lacks
// (MPI without the library; NCCL later) reports why it is unavailable.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "meshtrain/comm/transport.h"

namespace meshtrain::comm {

// What a transport needs to join its group.
struct TransportArgs {
  int rank = 0, size = 1;     // this process in the group (MPI: taken from MPI_COMM_WORLD)
  std::string job_id;         // names shared-memory segments (shm)
  std::string comm_name;      // distinguishes communicators of one job (shm)
  double timeout_s = 300;
};

struct TransportBackend {
  std::string name;
  // "" when usable in this build and process, else why not.
  std::string (*unavailable)();
  std::unique_ptr<Transport> (*create)(const TransportArgs& args);
};

const std::vector<TransportBackend>& transport_backends();
// Throws a UsageError naming the known backends, or why this one is unavailable.
std::unique_ptr<Transport> make_transport(const std::string& name, const TransportArgs& args);

}  // namespace meshtrain::comm
