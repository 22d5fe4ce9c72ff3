#include "meshtrain/ckpt/buddy_copies.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "meshtrain/ckpt/checkpoint_dir.h"
#include "meshtrain/ckpt/checkpoint_index.h"
#include "meshtrain/ckpt/shard_layout.h"
#include "meshtrain/core/error.h"
#include "meshtrain/io/atomic_file.h"

namespace meshtrain::ckpt {

namespace fs = std::filesystem;

namespace {

std::vector<int> ranks_on(const NodeMap& map, int node) {
  std::vector<int> out;
  for (int r = 0; r < map.world(); ++r)
    if (map.node_of[r] == node) out.push_back(r);
  return out;
}

}  // namespace

void prune_node_root(const std::string& root, int keep) {
  if (keep <= 0) return;
  std::vector<int64_t> indexed;
  for (const CheckpointStatus& c : list_checkpoints(root))
    if (fs::exists(fs::path(c.dir) / kIndexFileName)) indexed.push_back(c.step);
  if (static_cast<int>(indexed.size()) <= keep) return;
  const int64_t oldest_kept = indexed[indexed.size() - static_cast<size_t>(keep)];
  std::error_code ec;
  for (const CheckpointStatus& c : list_checkpoints(root))
    if (c.step < oldest_kept) fs::remove_all(c.dir, ec);
}

int NodeMap::buddy(int rank) const {
  const std::vector<int> ids = nodes();
  if (ids.size() < 2) return -1;
  const int node = node_of[rank];
  const auto at = std::find(ids.begin(), ids.end(), node) - ids.begin();
  const int next = ids[static_cast<size_t>(at + 1) % ids.size()];
  const std::vector<int> mine = ranks_on(*this, node), theirs = ranks_on(*this, next);
  const auto local = std::find(mine.begin(), mine.end(), rank) - mine.begin();
  return theirs[static_cast<size_t>(local) % theirs.size()];
}

int NodeMap::leader(int node) const {
  for (int r = 0; r < world(); ++r)
    if (node_of[r] == node) return r;
  return -1;
}

std::vector<int> NodeMap::nodes() const {
  std::vector<int> ids = node_of;
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

NodeMap gather_node_map(comm::Communicator& comm) {
  const int64_t mine = comm.node_id();
  std::vector<int64_t> all(static_cast<size_t>(comm.size()));
  comm.allgather(&mine, all.data(), all.size(), DType::I64).wait();
  NodeMap map;
  for (int64_t n : all) map.node_of.push_back(static_cast<int>(n));
  return map;
}

std::string read_whole_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  MT_CHECK(in.good(), "cannot open {}", path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void send_bytes(comm::Communicator& comm, const std::string& bytes, int peer) {
  const int64_t n = static_cast<int64_t>(bytes.size());
  comm.send(&n, 1, DType::I64, peer).wait();
  if (n) comm.send(bytes.data(), bytes.size(), DType::U8, peer).wait();
}

std::string recv_bytes(comm::Communicator& comm, int peer) {
  int64_t n = 0;
  comm.recv(&n, 1, DType::I64, peer).wait();
  std::string bytes(static_cast<size_t>(n), '\0');
  if (n) comm.recv(bytes.data(), bytes.size(), DType::U8, peer).wait();
  return bytes;
}

void exchange_buddy_shards(comm::Communicator& comm, const NodeMap& map, const std::string& dir,
                           const std::vector<int64_t>& bytes) {
  const int me = comm.rank(), world = map.world();
  const int buddy = map.buddy(me);
  if (buddy < 0) return;
  const std::string mine = read_whole_file((fs::path(dir) / shard_file_name(me, world)).string());
  MT_CHECK(static_cast<int64_t>(mine.size()) == bytes[me],
           "buddy copy of shard {}: {} bytes on file, {} written", me, mine.size(), bytes[me]);
  std::vector<int> wards;
  std::vector<std::string> incoming;
  for (int r = 0; r < world; ++r) {
    if (map.buddy(r) != me) continue;
    wards.push_back(r);
    incoming.emplace_back(static_cast<size_t>(bytes[r]), '\0');
  }
  std::vector<comm::Work> pending;
  for (size_t i = 0; i < wards.size(); ++i)
    pending.push_back(comm.recv(incoming[i].data(), incoming[i].size(), DType::U8, wards[i]));
  pending.push_back(comm.send(mine.data(), mine.size(), DType::U8, buddy));
  for (comm::Work& w : pending) w.wait();
  for (size_t i = 0; i < wards.size(); ++i)
    write_file_atomic((fs::path(dir) / shard_file_name(wards[i], world)).string(),
                      incoming[i].data(), incoming[i].size());
}

std::vector<std::string> gather_rank_blobs(comm::Communicator& comm, const std::string& mine,
                                           const std::vector<int64_t>& sizes) {
  const int me = comm.rank(), world = comm.size();
  if (me != 0) {
    if (!mine.empty()) comm.send(mine.data(), mine.size(), DType::U8, 0).wait();
    return {};
  }
  std::vector<std::string> all(static_cast<size_t>(world));
  all[0] = mine;
  std::vector<comm::Work> pending;
  for (int r = 1; r < world; ++r) {
    all[r].assign(static_cast<size_t>(sizes[r]), '\0');
    if (sizes[r]) pending.push_back(comm.recv(all[r].data(), all[r].size(), DType::U8, r));
  }
  for (comm::Work& w : pending) w.wait();
  return all;
}

void replicate_index(comm::Communicator& comm, const NodeMap& map, const std::string& root,
                     int64_t step, int keep_last) {
  const int me = comm.rank();
  const std::string index_path = (fs::path(step_dir(root, step)) / kIndexFileName).string();
  if (me == 0) {
    const std::string index = read_whole_file(index_path);
    for (int node : map.nodes())
      if (node != map.node_of[0]) send_bytes(comm, index, map.leader(node));
  } else if (map.leader(map.node_of[me]) == me && map.node_of[me] != map.node_of[0]) {
    const std::string index = recv_bytes(comm, 0);
    fs::create_directories(step_dir(root, step));
    write_file_atomic(index_path, index.data(), index.size());
    write_latest_pointer(root, step);
  }
  if (map.leader(map.node_of[me]) == me) prune_node_root(root, keep_last);
}

}  // namespace meshtrain::ckpt
