// The doctor's pairwise checks (doctor.h): every pair of ranks exchanges
// small messages (latency) and large ones in both directions at once
// (bandwidth). Pairs are scheduled in rounds of the circle method, each rank
// in at most one pair per round, so a link is measured without the others'
// traffic. Each pair talks over a 2-rank communicator of its own, so a pair
// that does not answer within the communicator's timeout (the doctor makes
// it --timeout-s) is reported broken and the rounds go on.
#pragma once
#include <vector>

#include "meshtrain/comm/communicator.h"
#include "meshtrain/doctor/doctor.h"

namespace meshtrain::doctor {

// The pairs of each round for `n` ranks (n - 1 rounds for even n, n for odd).
std::vector<std::vector<std::pair<int, int>>> pair_rounds(int n);

// This rank's links with higher ranks (it measures those it is the lower end of).
std::vector<LinkResult> probe_links(comm::Communicator& comm, const DoctorOptions& o);

// Test hook: MESHTRAIN_TEST_BROKEN_LINK = "A-B": ranks A and B never send to
// each other, as across a cut cable.
bool link_cut(int a, int b);

}  // namespace meshtrain::doctor
