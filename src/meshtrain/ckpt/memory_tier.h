// The memory tier on restart: where a run keeps its in-memory checkpoints
// (written by a CheckpointWriter with buddy_copies) and how a restarted job
// puts one back together. Each node's root holds the index and the shards of
// its own ranks and of its buddies'; after a lost node the survivors still
// hold every shard, and each node receives what it lacks from them, so every
// rank can then load the step from its own node's memory like any checkpoint
// directory. When some shard is in no surviving memory (a rank and its buddy
// both lost) the caller reads the disk instead.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "meshtrain/comm/communicator.h"

namespace meshtrain::ckpt {

// A run's store: <memory_dir>/meshtrain-ckpt-<16 hex digits of a hash of the absolute
// checkpoint directory>, so every attempt of the same run (an elastic
// restart, a rerun of the same command) finds it.
std::string memory_store(const std::string& memory_dir, const std::string& checkpoint_dir);
// One node's root in the store: <store>/node-<node>.
std::string memory_node_root(const std::string& store, int node);

struct MemoryCheckpoint {
  std::string dir;          // this rank's node's step directory, complete
  int64_t step = 0;
  int files_received = 0;   // by this rank's node (shards and index) from other nodes
  int64_t bytes_received = 0;
};

// Collective over `comm` (nullptr: one process): the newest step at or after
// `at_least` whose index and every shard survive in some node's memory, with
// what each node lacks copied to it from the survivors. nullopt when no such
// step exists; then nothing was copied.
// Test hook MESHTRAIN_TEST_LOSE_NODE_MEMORY="N[,N...]": on a restarted
// attempt (launch::restart_count() > 0) those nodes' roots are removed first,
// as if the nodes had been replaced.
std::optional<MemoryCheckpoint> gather_memory_checkpoint(comm::Communicator* comm,
                                                         const std::string& store,
                                                         int64_t at_least);

// The newest step under a disk root whose index.json exists (by name only:
// no checkpoint file is opened), or -1.
int64_t newest_indexed_step(const std::string& root);

// Collective when comm is set: each node's lowest rank removes its node root
// (after_step < 0: a finished run's copies; the store goes too once no node
// root is left), or only its steps after `after_step` (a run that starts
// fresh or resumed from an older disk checkpoint: those steps will be saved
// again, from other weights).
void clear_memory_store(comm::Communicator* comm, const std::string& store, int64_t after_step = -1);

}  // namespace meshtrain::ckpt
