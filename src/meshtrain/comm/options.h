// Settings of a communicator. Each has an environment variable so a job can
// be tuned without code changes; the config file's "comm" section maps onto
// the same fields.
#pragma once
#include <array>
#include <cstddef>
#include <string>

#include "meshtrain/comm/types.h"

namespace meshtrain::comm {

struct CommOptions {
  // "auto" (shm on one node, MPI across nodes), "shm" or "mpi". MESHTRAIN_COMM_TRANSPORT
  std::string transport = "auto";
  // Every wait gives up after this long, naming the missing rank. MESHTRAIN_COMM_TIMEOUT (s)
  double timeout_s = 300;
  // Compare op, dtype, count and root on all ranks before each collective.
  // MESHTRAIN_COMM_DEBUG=1
  bool debug = false;
  // Treat consecutive groups of k ranks as nodes (exercises the two-level
  // algorithm on one machine). MESHTRAIN_COMM_NODE_SIZE; 0 = real placement.
  int node_size = 0;
  // Algorithm per op; empty = chosen by the cost model.
  // MESHTRAIN_COMM_ALGO="allreduce=ring,broadcast=tree" or MESHTRAIN_COMM_ALGO_ALLREDUCE=ring
  std::array<std::string, kCollOpCount> algorithm{};
  // Collectives up to this many bytes issued while the engine is idle run on
  // the caller's thread (no hand-off latency). MESHTRAIN_COMM_INLINE_BYTES
  size_t inline_bytes = 256 * 1024;
  // Measured alpha/beta table (meshtrain bench comm --calibrate writes it).
  // MESHTRAIN_COMM_COST_FILE; default ~/.cache/meshtrain/comm_cost.json if present.
  std::string cost_file;
  // Test hook: every operation takes at least the time its bytes
  // (comm/wire_bytes.h) need at this rate in GB/s (1e9 bytes), the rank
  // sleeping out the rest: a slow network emulated on one host, so what
  // gradient compression saves is measurable there. 0 = off.
  // MESHTRAIN_COMM_THROTTLE_GBPS
  double throttle_gbps = 0;

  static CommOptions from_env();
};

}  // namespace meshtrain::comm
