// Buddy copies: the memory tier of checkpoints. Each node keeps checkpoints
// in its own memory (a tmpfs root such as /dev/shm/meshtrain-ckpt-<key>/node-<n>);
// each rank's shard is also stored in the memory of its buddy, a rank on
// another node, and every node holds the index. A restart after one lost node
// then gathers a complete checkpoint from the survivors' memory
// (memory_tier.h) instead of reading the checkpoint directory.
//
// Every function here is collective over the writer's communicator, and
// every rank computes the same transfers from the same NodeMap, so sends and
// receives pair up without negotiation.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "meshtrain/comm/communicator.h"

namespace meshtrain::ckpt {

// Which node each rank of a communicator runs on.
struct NodeMap {
  std::vector<int> node_of;  // by rank

  int world() const { return static_cast<int>(node_of.size()); }
  // The rank that stores `rank`'s copy: the same local index on the next
  // node (wrapping), or -1 when every rank is on one node (its own node's
  // memory is then the only copy: it survives the rank, not the node).
  int buddy(int rank) const;
  // The lowest rank on `node` (it writes what the node receives).
  int leader(int node) const;
  std::vector<int> nodes() const;  // distinct node ids, ascending
};

// Collective: every rank's comm.node_id().
NodeMap gather_node_map(comm::Communicator& comm);

// Collective, after every rank wrote its shard file into `dir` (its node's
// step directory) and `bytes` holds every rank's file size: each rank sends
// its file to its buddy, which writes it into its own node's `dir`.
void exchange_buddy_shards(comm::Communicator& comm, const NodeMap& map, const std::string& dir,
                           const std::vector<int64_t>& bytes);

// Collective: rank 0 receives every rank's state blob (`mine`: this rank's);
// the other ranks get an empty vector. `sizes`: every rank's blob size.
std::vector<std::string> gather_rank_blobs(comm::Communicator& comm, const std::string& mine,
                                           const std::vector<int64_t>& sizes);

// Collective, after rank 0 wrote `dir`/index.json: the index reaches the
// leader of every other node, which writes it into its node's `dir`, points
// its root's `latest` at `step` and applies the retention rule there.
void replicate_index(comm::Communicator& comm, const NodeMap& map, const std::string& root,
                     int64_t step, int keep_last);

// Keeps the newest `keep` steps that have an index in a node's root, and
// every newer directory (a save still being written); removes the older
// ones. A node root holds only some shards of each step, so the
// completeness rule of apply_retention does not apply there. 0 keeps all.
void prune_node_root(const std::string& root, int keep);

// Whole-file helpers for the transfers (the files live in memory).
std::string read_whole_file(const std::string& path);
void send_bytes(comm::Communicator& comm, const std::string& bytes, int peer);
std::string recv_bytes(comm::Communicator& comm, int peer);

}  // namespace meshtrain::ckpt
