// How communicators come to be: the world from the launcher's, mpirun's or
// Slurm's environment (or an explicit local group), and sub-groups split
// from an existing communicator. Transports are created by name through the
// registry; placement is learned collectively.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>

#include "meshtrain/comm/comm_impl.h"
#include "meshtrain/comm/flight_dump.h"
#include "meshtrain/core/debug_log.h"
#include "meshtrain/comm/transport_registry.h"
#include "meshtrain/comm/transports/shm/shm_segment.h"  // random_job_id
#if MESHTRAIN_HAVE_MPI
#include "meshtrain/comm/transports/mpi/mpi_transport.h"
#endif

namespace meshtrain::comm {

namespace {

std::string sanitize_job_id(const std::string& id) {
  std::string out = id;
  for (char& c : out)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.') c = '_';
  return out;
}

// Each world communicator of a process gets a fresh name, so a new one never
// opens a segment that an old one has not unlinked yet.
std::atomic<int> g_world_counter{0};

std::string next_world_name() { return fmt::format("w{}", g_world_counter++); }

AlgorithmSelector world_selector(const CommOptions& opts) {
  return AlgorithmSelector(opts, CostModel::load(opts.cost_file.empty() ? CostModel::default_path()
                                                                        : opts.cost_file));
}

}  // namespace

std::shared_ptr<CommImpl> make_comm_impl(const CommOptions& opts, const AlgorithmSelector& selector,
                                         std::unique_ptr<Transport> transport, std::string job_id,
                                         std::string name, Placement placement) {
  auto impl = std::make_shared<CommImpl>(opts, selector);
  impl->transport = std::move(transport);
  impl->p2p = impl->transport->p2p_lane();
  impl->job_id = std::move(job_id);
  impl->name = std::move(name);
  impl->placement = placement;
  gather_placement(*impl->transport, impl->placement,
                   impl->context([] { return std::string("placement exchange"); }));
  impl->selector.set_group(impl->transport->kind(), impl->size(), impl->placement);
  CommImpl* raw = impl.get();
  impl->dump_id = register_flight_dump([raw] {
    std::string progress = raw->transport->peer_progress();
    if (!progress.empty() && progress.back() != '\n') progress += '\n';
    return fmt::format("[rank {}] flight record of communicator '{}' (rank {} of {}), on demand:\n{}{}",
                       log_rank(), raw->name, raw->rank(), raw->size(), raw->recorder.dump(), progress);
  });
  MT_LOG(Info, Init, "communicator '{}': rank {} of {} over {} (node {}, host {}; {} nodes), job {}, "
         "timeout {} s", impl->name, impl->rank(), impl->size(), impl->transport->kind(),
         impl->placement.node_id, impl->placement.host_id, impl->placement.num_nodes,
         impl->job_id, opts.timeout_s);
  return impl;
}

CommImpl::~CommImpl() {
  if (dump_id >= 0) unregister_flight_dump(dump_id);
}

Communicator Communicator::create_local(int rank, int size, const std::string& job_id,
                                        const CommOptions& opts) {
  return create_local_named(rank, size, job_id, next_world_name(), opts);
}

Communicator Communicator::create_local_named(int rank, int size, const std::string& job_id,
                                              const std::string& name, const CommOptions& opts) {
  std::string id = sanitize_job_id(job_id);
  Placement p;
  p.node_id = opts.node_size > 0 ? rank / opts.node_size : 0;
  auto t = make_transport("shm", {rank, size, id, name, opts.timeout_s});
  log_set_rank(rank);
  return Communicator(make_comm_impl(opts, world_selector(opts), std::move(t), id, name, p));
}

Communicator Communicator::from_env(const CommOptions& opts) {
  WorldInfo w = world_from_env();
#if MESHTRAIN_HAVE_MPI
  if (w.under_mpi() || opts.transport == "mpi") {
    mpi::init_once();
    int rank = mpi::world_rank(), size = mpi::world_size();
    std::string id = sanitize_job_id(mpi::broadcast_job_id(w.job_id.empty() ? random_job_id() : w.job_id));
    std::string name = next_world_name();
    Placement p;
    p.host_id = mpi::host_id();
    p.node_id = opts.node_size > 0 ? rank / opts.node_size : p.host_id;
    bool one_host = mpi::all_on_one_host();
    bool use_shm = opts.transport == "shm" || (opts.transport == "auto" && one_host);
    MT_CHECK(!(opts.transport == "shm" && !one_host),
             "transport 'shm' needs all ranks on one machine; these {} ranks span several", size);
    auto t = make_transport(use_shm ? "shm" : "mpi", {rank, size, id, name, opts.timeout_s});
    log_set_rank(rank);
    return Communicator(make_comm_impl(opts, world_selector(opts), std::move(t), id, name, p));
  }
#endif
  if (opts.transport == "mpi")
    throw UsageError("transport 'mpi' needs a build with MPI and a launch under mpirun");
  if (opts.transport != "auto" && opts.transport != "shm")
    throw UsageError(fmt::format("unknown transport '{}' (auto, shm, mpi)", opts.transport));
  std::string id = sanitize_job_id(w.job_id.empty() && w.size == 1 ? "solo" + std::to_string(getpid()) : w.job_id);
  std::string name = next_world_name();
  Placement p;
  p.node_id = opts.node_size > 0 ? w.rank / opts.node_size : w.rank / std::max(1, w.local_size);
  p.host_id = w.rank / std::max(1, w.local_size);
  auto t = make_transport("shm", {w.rank, w.size, id, name, opts.timeout_s});
  log_set_rank(w.rank);
  return Communicator(make_comm_impl(opts, world_selector(opts), std::move(t), id, name, p));
}

Communicator CommImpl::split_now(int color, int key, const OpContext& ctx, double timeout_s) {
  int32_t mine[5] = {color, key, rank(), placement.node_id, placement.host_id};
  std::vector<int32_t> all(5 * static_cast<size_t>(size()));
  transport->allgather_small(mine, sizeof(mine), all.data(), ctx);
  int id = split_count++;
  // Collective on every rank, colour or not (MPI_Comm_split); null when the
  // transport leaves building the group to us.
  std::unique_ptr<Transport> native_child = transport->split(color, key);
  if (color < 0) return Communicator();
  std::vector<std::pair<int, int>> members;  // (key, old rank)
  // Shared memory serves a group whose members share a node (emulated nodes
  // count, so the two-level path crosses "nodes" over MPI when emulated).
  bool one_host = true;
  for (int r = 0; r < size(); ++r)
    if (all[5 * r] == color) {
      members.push_back({all[5 * r + 1], r});
      one_host &= all[5 * r + 3] == placement.node_id;
    }
  std::sort(members.begin(), members.end());
  int new_rank = 0;
  for (size_t i = 0; i < members.size(); ++i)
    if (members[i].second == rank()) new_rank = static_cast<int>(i);
  std::string child_name = fmt::format("{}.{}c{}", name, id, color);
  std::unique_ptr<Transport> t;
  if (native_child && !one_host) t = std::move(native_child);
  CommOptions child_opts = opts;
  if (timeout_s > 0) child_opts.timeout_s = timeout_s;
  if (!t)
    t = make_transport("shm", {new_rank, static_cast<int>(members.size()), job_id, child_name,
                               child_opts.timeout_s});
  Placement p;
  p.node_id = placement.node_id;
  p.host_id = placement.host_id;
  return Communicator(make_comm_impl(child_opts, selector, std::move(t), job_id, child_name, p));
}

}  // namespace meshtrain::comm
