// Where the ranks of a communicator run: each rank's node (the unit of the
// two-level algorithm, real or emulated with comm.node_size) and host (the
// real machine, where shared memory works). Learned once, collectively, when
// a communicator is created; the algorithm selector reads it.
#pragma once
#include "meshtrain/comm/transport.h"

namespace meshtrain::comm {

struct Placement {
  int node_id = 0;
  int host_id = 0;
  int num_nodes = 1;        // distinct nodes in the group
  bool single_host = true;  // every rank on this rank's host
};

// Collective over `t`: fills num_nodes and single_host from every rank's
// node_id and host_id.
void gather_placement(Transport& t, Placement& p, const OpContext& ctx);

}  // namespace meshtrain::comm
