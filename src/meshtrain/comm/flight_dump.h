// The flight records on demand: SIGUSR1 (`meshtrain trace-dump`, or `kill
// -USR1` of a rank or of its launcher, which forwards it) makes every live
// communicator of the process print its last operations and every rank's
// progress, for a job that hangs without timing out yet. The signal handler
// only writes a byte to a pipe; a thread of its own does the printing.
// MESHTRAIN_FLIGHT_SIGNAL=0 leaves SIGUSR1 alone.
#pragma once
#include <functional>
#include <string>

namespace meshtrain::comm {

// A communicator's dump, called under the registry's lock; returns the id to
// unregister with. The first registration installs the handler.
int register_flight_dump(std::function<std::string()> dump);
void unregister_flight_dump(int id);
// Every registered dump, as the signal would print it (tests, the launcher).
std::string flight_dumps();
// Installs the handler now (the CLI does at start, so a rank signalled before
// its first communicator exists is not killed by SIGUSR1's default action).
void install_flight_dump_signal();

}  // namespace meshtrain::comm
