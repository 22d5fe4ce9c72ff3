// What each rank measures of itself for the doctor (doctor.h): GEMM rate,
// free memory and disk, and its clock against rank 0's.
#pragma once
#include "meshtrain/comm/communicator.h"
#include "meshtrain/doctor/doctor.h"

namespace meshtrain::doctor {

// This rank's facts; collective (the clock exchange with rank 0).
RankFacts probe_rank(comm::Communicator& comm, const DoctorOptions& o);

// Test hook: MESHTRAIN_TEST_SLOW_RANK = "R" or "R:F" makes rank R's GEMM
// probe do F (default 2) times the work per timed call, as a CPU F times
// slower would. 1 elsewhere.
double slow_rank_factor(int rank);

}  // namespace meshtrain::doctor
