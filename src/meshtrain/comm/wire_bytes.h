// Bytes one rank sends for a collective under a bandwidth-optimal algorithm
// (ring or halving-doubling), from the call's size in the count convention
// of communicator.h. One formula for what a step reports as "bytes on the
// wire" and for the test throttle (CommOptions::throttle_gbps), so the two
// agree and a compressed gradient's saving is measured the same way as the
// uncompressed reduction it replaces:
//   allreduce             2 (p-1)/p · bytes
//   reduce_scatter,
//   allgather             (p-1)/p · bytes   (bytes = the whole buffer)
//   broadcast, reduce     (p-1)/p · bytes   (pipelined/scattered trees)
//   alltoall              (p-1) · bytes     (bytes = one block per peer)
//   send                  bytes; recv, barrier: 0
#pragma once
#include <cstddef>

#include "meshtrain/comm/types.h"

namespace meshtrain::comm {

double bytes_sent_per_rank(CollOp op, size_t bytes, int ranks);

}  // namespace meshtrain::comm
