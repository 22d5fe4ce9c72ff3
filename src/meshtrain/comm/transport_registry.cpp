#include "meshtrain/comm/transport_registry.h"

#include <fmt/format.h>

#include "meshtrain/comm/transports/shm/shm_transport.h"
#include "meshtrain/core/error.h"
#if MESHTRAIN_HAVE_MPI
#include "meshtrain/comm/transports/mpi/mpi_transport.h"
#endif

namespace meshtrain::comm {

namespace {

std::string always_available() { return ""; }

std::unique_ptr<Transport> create_shm(const TransportArgs& a) {
  return std::make_unique<ShmTransport>(a.rank, a.size, a.job_id, a.comm_name, a.timeout_s);
}

#if MESHTRAIN_HAVE_MPI
std::unique_ptr<Transport> create_mpi(const TransportArgs&) {
  mpi::init_once();
  return std::make_unique<MpiTransport>(mpi::dup_world());
}
#else
std::string mpi_missing() { return "this build has no MPI (install libopenmpi-dev and rebuild)"; }
std::unique_ptr<Transport> create_mpi(const TransportArgs&) { fail("{}", mpi_missing()); }
#endif

}  // namespace

const std::vector<TransportBackend>& transport_backends() {
  static const std::vector<TransportBackend> backends = {
      {"shm", &always_available, &create_shm},
#if MESHTRAIN_HAVE_MPI
      {"mpi", &always_available, &create_mpi},
#else
      {"mpi", &mpi_missing, &create_mpi},
#endif
  };
  return backends;
}

std::unique_ptr<Transport> make_transport(const std::string& name, const TransportArgs& args) {
  std::vector<std::string> names;
  for (const TransportBackend& b : transport_backends()) {
    names.push_back(b.name);
    if (b.name != name) continue;
    if (const std::string why = b.unavailable(); !why.empty())
      throw UsageError(fmt::format("transport '{}' is unavailable: {}", name, why));
    return b.create(args);
  }
  throw UsageError(fmt::format("unknown transport '{}' (known: {})", name, fmt::join(names, ", ")));
}

}  // namespace meshtrain::comm
