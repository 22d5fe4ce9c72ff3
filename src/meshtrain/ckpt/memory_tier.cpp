#include "meshtrain/ckpt/memory_tier.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <vector>

#include "meshtrain/ckpt/buddy_copies.h"
#include "meshtrain/ckpt/checkpoint_dir.h"
#include "meshtrain/ckpt/checkpoint_index.h"
#include "meshtrain/ckpt/shard_layout.h"
#include "meshtrain/core/debug_log.h"
#include "meshtrain/core/error.h"
#include "meshtrain/io/atomic_file.h"
#include "meshtrain/launch/heartbeat.h"

namespace meshtrain::ckpt {

namespace fs = std::filesystem;

namespace {

// Steps each rank reports from its node root: the newest two with an index
// (a save cut short may have left its index on some nodes only).
constexpr int kReported = 2;

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// One reported step: [step, index bytes, shard 0 bytes, ..., shard W-1
// bytes], -1 for the step when none and 0 bytes for an absent file.
std::vector<int64_t> no_step(int world) {
  std::vector<int64_t> entry(static_cast<size_t>(world) + 2, 0);
  entry[0] = -1;
  return entry;
}

std::vector<int64_t> report_step(const std::string& dir, int64_t step, int world) {
  std::vector<int64_t> entry = no_step(world);
  CheckpointIndex index;
  try {
    index = read_index(dir);
  } catch (const std::exception&) {
    return entry;  // torn or unreadable: not reported
  }
  if (index.world_size != world || static_cast<int>(index.files.size()) != world) return entry;
  std::error_code ec;
  entry[0] = step;
  entry[1] = static_cast<int64_t>(fs::file_size(fs::path(dir) / kIndexFileName, ec));
  for (const FileEntry& f : index.files) {
    const auto size = fs::file_size(fs::path(dir) / f.path, ec);
    if (!ec && size == f.bytes && f.rank >= 0 && f.rank < world)
      entry[static_cast<size_t>(f.rank) + 2] = static_cast<int64_t>(size);
  }
  return entry;
}

std::vector<int64_t> report_node_root(const std::string& root, int world) {
  std::vector<int64_t> out;
  std::vector<CheckpointStatus> steps = list_checkpoints(root);
  std::reverse(steps.begin(), steps.end());
  for (const CheckpointStatus& c : steps) {
    if (static_cast<int>(out.size()) == kReported * (world + 2)) break;
    std::vector<int64_t> e = report_step(c.dir, c.step, world);
    if (e[0] >= 0) out.insert(out.end(), e.begin(), e.end());
  }
  while (static_cast<int>(out.size()) < kReported * (world + 2)) {
    const std::vector<int64_t> none = no_step(world);
    out.insert(out.end(), none.begin(), none.end());
  }
  return out;
}

// Every rank's reports, and what they say about one step.
struct Reports {
  int world = 1;
  std::vector<int64_t> all;  // by rank, kReported entries each
  const int64_t* entry(int rank, int64_t step) const {
    const size_t stride = static_cast<size_t>(world) + 2;
    for (int k = 0; k < kReported; ++k) {
      const int64_t* e = all.data() + (static_cast<size_t>(rank) * kReported + k) * stride;
      if (e[0] == step) return e;
    }
    return nullptr;
  }
  // The lowest rank holding file `slot` (0: index, s + 1: shard s) of `step`.
  int holder(int64_t step, int slot) const {
    for (int r = 0; r < world; ++r)
      if (const int64_t* e = entry(r, step); e && e[1 + slot] > 0) return r;
    return -1;
  }
};

// One file a node lacks, and who sends it.
struct Transfer {
  int from = -1, to = -1;
  int slot = 0;  // 0: index.json, s + 1: shard s
  int64_t bytes = 0;
};

// The transfers that complete every node's copy of `step`; empty with
// complete = false when some file is in no rank's memory.
std::vector<Transfer> plan_transfers(const Reports& rep, const NodeMap& map, int64_t step,
                                     bool& complete) {
  std::vector<Transfer> plan;
  complete = true;
  for (int slot = 0; slot <= rep.world; ++slot) {
    const int from = rep.holder(step, slot);
    if (from < 0) {
      complete = false;
      return {};
    }
    const int64_t bytes = rep.entry(from, step)[1 + slot];
    for (int node : map.nodes()) {
      bool has = false;
      for (int r = 0; r < rep.world && !has; ++r)
        if (map.node_of[r] == node)
          if (const int64_t* e = rep.entry(r, step); e && e[1 + slot] > 0) has = true;
      if (!has) plan.push_back({from, map.leader(node), slot, bytes});
    }
  }
  return plan;
}

std::string slot_file(int slot, int world) {
  return slot == 0 ? std::string(kIndexFileName) : shard_file_name(slot - 1, world);
}

// Test hook MESHTRAIN_TEST_LOSE_NODE_MEMORY (memory_tier.h).
void maybe_lose_node_memory(comm::Communicator* comm, const std::string& store, const NodeMap& map) {
  const char* v = std::getenv("MESHTRAIN_TEST_LOSE_NODE_MEMORY");
  if (!v || !*v || launch::restart_count() == 0) return;
  const int me = comm ? comm->rank() : 0;
  std::stringstream list(v);
  for (std::string item; std::getline(list, item, ',');) {
    const int node = std::atoi(item.c_str());
    if (map.node_of[me] == node && map.leader(node) == me) {
      std::error_code ec;
      fs::remove_all(memory_node_root(store, node), ec);
      std::fprintf(stderr, "MESHTRAIN_TEST_LOSE_NODE_MEMORY: node %d's in-memory checkpoints removed\n",
                   node);
    }
  }
  if (comm) comm->barrier().wait();  // no rank of a lost node reads before it is gone
}

void run_transfers(comm::Communicator& comm, const std::vector<Transfer>& plan, const std::string& dir,
                   int world, MemoryCheckpoint& out) {
  const int me = comm.rank();
  std::vector<std::string> outgoing, incoming;
  std::vector<const Transfer*> received;
  outgoing.reserve(plan.size());
  incoming.reserve(plan.size());
  std::vector<comm::Work> pending;
  for (const Transfer& t : plan) {
    if (t.to == me) {
      incoming.emplace_back(static_cast<size_t>(t.bytes), '\0');
      received.push_back(&t);
      pending.push_back(comm.recv(incoming.back().data(), incoming.back().size(), DType::U8, t.from));
    }
    if (t.from == me) {
      outgoing.push_back(read_whole_file((fs::path(dir) / slot_file(t.slot, world)).string()));
      MT_CHECK(static_cast<int64_t>(outgoing.back().size()) == t.bytes,
               "in-memory checkpoint {}: {} changed size", dir, slot_file(t.slot, world));
      pending.push_back(comm.send(outgoing.back().data(), outgoing.back().size(), DType::U8, t.to));
    }
  }
  for (comm::Work& w : pending) w.wait();
  if (received.empty()) return;
  fs::create_directories(dir);
  // Shards before the index: a reader never sees an index whose files are missing.
  for (int pass = 0; pass < 2; ++pass)
    for (size_t i = 0; i < received.size(); ++i) {
      if ((received[i]->slot == 0) != (pass == 1)) continue;
      write_file_atomic((fs::path(dir) / slot_file(received[i]->slot, world)).string(),
                        incoming[i].data(), incoming[i].size());
      ++out.files_received;
      out.bytes_received += received[i]->bytes;
    }
}

}  // namespace

std::string memory_store(const std::string& memory_dir, const std::string& checkpoint_dir) {
  const std::string key = fs::weakly_canonical(fs::absolute(checkpoint_dir)).string();
  return (fs::path(memory_dir) / fmt::format("meshtrain-ckpt-{:016x}", fnv1a(key))).string();
}

std::string memory_node_root(const std::string& store, int node) {
  return (fs::path(store) / fmt::format("node-{}", node)).string();
}

std::optional<MemoryCheckpoint> gather_memory_checkpoint(comm::Communicator* comm,
                                                         const std::string& store,
                                                         int64_t at_least) {
  const bool multi = comm && comm->valid() && comm->size() > 1;
  const NodeMap map = multi ? gather_node_map(*comm) : NodeMap{{0}};
  const int me = multi ? comm->rank() : 0;
  maybe_lose_node_memory(multi ? comm : nullptr, store, map);
  const std::string root = memory_node_root(store, map.node_of[me]);
  Reports rep;
  rep.world = map.world();
  const std::vector<int64_t> mine = report_node_root(root, rep.world);
  rep.all.resize(mine.size() * static_cast<size_t>(rep.world));
  if (multi) comm->allgather(mine.data(), rep.all.data(), rep.all.size(), DType::I64).wait();
  else rep.all = mine;
  // Candidates, newest first: every reported step at or after at_least.
  std::vector<int64_t> steps;
  for (size_t i = 0; i < rep.all.size(); i += static_cast<size_t>(rep.world) + 2)
    if (rep.all[i] >= at_least && rep.all[i] >= 0) steps.push_back(rep.all[i]);
  std::sort(steps.rbegin(), steps.rend());
  steps.erase(std::unique(steps.begin(), steps.end()), steps.end());
  for (int64_t step : steps) {
    bool complete = false;
    const std::vector<Transfer> plan = plan_transfers(rep, map, step, complete);
    if (!complete) continue;
    MemoryCheckpoint out;
    out.step = step;
    out.dir = step_dir(root, step);
    std::string err;
    try {
      if (multi) run_transfers(*comm, plan, out.dir, rep.world, out);
    } catch (const std::exception& e) {
      err = e.what();
    }
    int64_t ok = err.empty() ? 1 : 0;
    if (multi) ok = comm->allreduce_scalar(ok, comm::ReduceOp::Min);
    if (!ok) {
      MT_LOG(Warn, Ckpt, "in-memory checkpoint of step {} could not be gathered: {}", step,
             err.empty() ? "failed on another rank" : err);
      return std::nullopt;
    }
    if (out.files_received > 0 && map.leader(map.node_of[me]) == me) write_latest_pointer(root, step);
    MT_LOG(Info, Ckpt, "in-memory checkpoint of step {}: {} file(s), {} bytes received by this node",
           step, out.files_received, out.bytes_received);
    return out;
  }
  return std::nullopt;
}

int64_t newest_indexed_step(const std::string& root) {
  int64_t newest = -1;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const auto step = parse_step_dir_name(e.path().filename().string());
    if (step && *step > newest && fs::exists(e.path() / kIndexFileName, ec)) newest = *step;
  }
  return newest;
}

void clear_memory_store(comm::Communicator* comm, const std::string& store, int64_t after_step) {
  const bool multi = comm && comm->valid() && comm->size() > 1;
  const NodeMap map = multi ? gather_node_map(*comm) : NodeMap{{0}};
  const int me = multi ? comm->rank() : 0;
  const int node = map.node_of[me];
  std::error_code ec;
  if (map.leader(node) == me) {
    const std::string root = memory_node_root(store, node);
    if (after_step < 0) {
      fs::remove_all(root, ec);
      fs::remove(store, ec);  // only once empty: another node's root may still be there
    } else {
      for (const auto& e : fs::directory_iterator(root, ec)) {
        const auto step = parse_step_dir_name(e.path().filename().string());
        if (step && *step > after_step) fs::remove_all(e.path(), ec);
      }
    }
  }
  if (multi) comm->barrier().wait();
}

}  // namespace meshtrain::ckpt
