// How a rank that gives up ends its job. A rank whose collective timed out
// or whose peer died must not wait for the others: under MPI, exiting runs
// MPI_Finalize, which waits for every rank, and the ranks on the far side of
// a cut link wait inside MPI forever, so the job never ends and its
// scheduler (or the elastic launcher) cannot act. As NCCL's watchdog aborts
// its communicator, a failing rank aborts the MPI job instead.
#pragma once

namespace meshtrain::comm {

// Under MPI (initialized, not finalized): MPI_Abort(MPI_COMM_WORLD,
// exit_code), so mpirun/srun end every rank. Otherwise it returns and the
// caller exits as usual (meshtrain's launcher and the peers' timeouts deal
// with the rest).
void end_job_after_error(int exit_code);

}  // namespace meshtrain::comm
