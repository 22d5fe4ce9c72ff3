#include "meshtrain/comm/job_end.h"

#include <cstdio>

#if MESHTRAIN_HAVE_MPI
#include "meshtrain/comm/transports/mpi/mpi_transport.h"
#endif

namespace meshtrain::comm {

void end_job_after_error(int exit_code) {
#if MESHTRAIN_HAVE_MPI
  // The error is already printed; flush it before MPI ends the process.
  std::fflush(stderr);
  std::fflush(stdout);
  mpi::abort_job(exit_code);
#else
  (void)exit_code;
#endif
}

}  // namespace meshtrain::comm
