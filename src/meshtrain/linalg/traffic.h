// What a rank moved during a distributed call, from its communicators'
// counters (comm/communicator.h), in one convention every algorithm's
// formula uses: a broadcast or reduce counts its buffer on every member, a
// send its message (a receive nothing: each word is counted once, where it
// leaves), an allgather or reduce-scatter (n-1)/n of the whole buffer, an
// allreduce 2(n-1)/n, an all-to-all its n-1 outgoing blocks.
#pragma once
#include <cstdint>
#include <map>
#include <vector>

#include "meshtrain/comm/communicator.h"
#include "meshtrain/linalg/process_grid.h"

namespace meshtrain::linalg {

struct Traffic {
  double bytes = 0;
  int64_t messages = 0;  // operations issued (receives not counted)
};

class TrafficMeter {
 public:
  explicit TrafficMeter(const Context& ctx);  // snapshot now
  Traffic since(const Context& ctx) const;    // moved since the snapshot

 private:
  std::map<const comm::Communicator*, comm::CommCounters> start_;
};

}  // namespace meshtrain::linalg
