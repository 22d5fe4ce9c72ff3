#include "meshtrain/comm/communicator.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <thread>

#include "meshtrain/comm/algorithms/algorithm.h"
#include "meshtrain/comm/flight_recorder.h"
#include "meshtrain/comm/reduce.h"
#include "meshtrain/comm/transport_registry.h"
#include "meshtrain/comm/transports/shm/shm_segment.h"  // random_job_id
#if MESHTRAIN_HAVE_MPI
#include "meshtrain/comm/transports/mpi/mpi_transport.h"
#endif

namespace meshtrain::comm {

using Clock = std::chrono::steady_clock;

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

struct Task {
  uint64_t seq = 0;
  CollOp op = CollOp::Barrier;
  std::string kind;  // fingerprint name: "allreduce", "split", "alloc_shared"
  CollArgs args;
  std::string algo;
  bool collective = true;
  std::function<void(const OpContext&)> body;
  std::shared_ptr<WorkState> work;
};

// What every rank compares before a collective in debug mode.
struct Fingerprint {
  char kind[16];
  char algo[20];
  uint32_t dtype;
  uint32_t redop;
  uint64_t count;
  uint64_t seq;
  int32_t root;
  int32_t pad;
};

std::string describe(const Fingerprint& f) {
  return fmt::format("{} #{} count={} dtype={} op={} root={} algo={}", f.kind, f.seq, f.count,
                     dtype_name(static_cast<DType>(f.dtype)),
                     reduce_op_name(static_cast<ReduceOp>(f.redop)), f.root, f.algo);
}

}  // namespace

struct CommImpl {
  std::unique_ptr<Transport> transport;
  CommOptions opts;
  CostModel cost;
  std::string job_id;
  std::string name;
  int node_id = 0;   // node for the two-level algorithm (maybe emulated)
  int host_id = 0;   // the real machine (shm is possible within one)
  int num_nodes = 1;
  bool single_host = true;
  int split_count = 0;
  uint64_t issued = 0;
  std::array<std::string, kCollOpCount> pinned{};
  FlightRecorder recorder;

  std::mutex mu;
  std::condition_variable cv;
  std::deque<Task> queue;
  bool busy = false;
  bool stop = false;
  std::thread thread;
  std::string broken;  // first failure: later operations fail at once
  bool reported = false;

  std::unique_ptr<Communicator> node_local, node_leaders;
  bool groups_ready = false;

  ~CommImpl() {
    {
      std::lock_guard lock(mu);
      stop = true;
    }
    cv.notify_all();
    if (thread.joinable()) thread.join();
  }

  int rank() const { return transport->rank(); }
  int size() const { return transport->size(); }

  OpContext context(std::function<std::string()> what) const {
    return {std::move(what), opts.timeout_s};
  }

  void engine_loop() {
    std::unique_lock lock(mu);
    for (;;) {
      cv.wait(lock, [&] { return (stop && queue.empty()) || (!queue.empty() && !busy); });
      if (queue.empty()) return;
      Task task = std::move(queue.front());
      queue.pop_front();
      busy = true;
      lock.unlock();
      run(task);
      lock.lock();
      busy = false;
      cv.notify_all();
    }
  }

  void debug_check(const Task& t, const OpContext& ctx) {
    Fingerprint mine{};
    std::snprintf(mine.kind, sizeof(mine.kind), "%s", t.kind.c_str());
    std::snprintf(mine.algo, sizeof(mine.algo), "%s", t.algo.c_str());
    mine.dtype = static_cast<uint32_t>(t.args.dtype);
    mine.redop = static_cast<uint32_t>(t.args.redop);
    mine.count = t.args.count;
    mine.seq = t.seq;
    mine.root = t.args.root;
    std::vector<Fingerprint> all(size());
    transport->allgather_small(&mine, sizeof(mine), all.data(), ctx);
    bool same = true;
    for (const auto& f : all) same &= std::memcmp(&f, &all[0], sizeof(f)) == 0;
    if (same) return;
    std::string msg = fmt::format("{}: ranks called different collectives:", ctx.what());
    for (int r = 0; r < size(); ++r) msg += fmt::format("\n  rank {}: {}", r, describe(all[r]));
    throw CommError(msg);
  }

  // Test hook: MESHTRAIN_COMM_TEST_DELAY_US=D sleeps D microseconds before
  // every allreduce (on whichever thread runs it), emulating a slow network so
  // tests can show data parallelism overlapping communication with backward.
  static void test_delay() {
    static const long us = [] {
      const char* s = std::getenv("MESHTRAIN_COMM_TEST_DELAY_US");
      return s ? std::max(0L, std::atol(s)) : 0L;
    }();
    if (us > 0) std::this_thread::sleep_for(std::chrono::microseconds(us));
  }

  void run(Task& t) {
    const WorkState* ws = t.work.get();
    // No clock read on this path: the deadline starts at the first stalled
    // wait (OpContext::deadline) and the flight record uses the cycle counter.
    OpContext ctx = context([ws, this] { return fmt::format("{} on '{}'", ws->what(), name); });
    transport->note_op(t.op, t.seq);
    const size_t slot = recorder.started(t.work);
    try {
      if (!broken.empty())
        throw CommError(fmt::format("{}: communicator unusable after an earlier failure: {}",
                                    t.work->what(), broken));
      if (opts.debug && t.collective && size() > 1) debug_check(t, ctx);
      if (t.op == CollOp::Allreduce) test_delay();
      t.body(ctx);
      recorder.finished(slot, t.seq, true);
      transport->note_done();
      t.work->finish();
    } catch (const std::exception& e) {
      recorder.finished(slot, t.seq, false);
      bool first = broken.empty();
      if (first) {
        broken = e.what();
        transport->abort(broken);
      }
      if (first && !reported) {
        reported = true;
        std::fprintf(stderr, "[rank %d] comm error: %s\n[rank %d] last operations:\n%s",
                     rank(), e.what(), rank(), recorder.dump().c_str());
        std::string peers = transport->peer_progress();
        if (!peers.empty()) std::fprintf(stderr, "[rank %d] progress of all ranks:\n%s", rank(), peers.c_str());
      }
      t.work->finish(std::current_exception());
    }
  }

  Work enqueue(Task task, size_t inline_bytes) {
    auto work = task.work;
    std::unique_lock lock(mu);
    if (queue.empty() && !busy && inline_bytes <= opts.inline_bytes) {
      busy = true;
      lock.unlock();
      run(task);
      lock.lock();
      busy = false;
      cv.notify_all();
      return Work(work);
    }
    queue.push_back(std::move(task));
    if (!thread.joinable()) thread = std::thread([this] { engine_loop(); });
    lock.unlock();
    cv.notify_all();
    return Work(work);
  }

  // `kind` must be a string literal or static name; `detail` replaces the
  // standard description (rare ops only).
  Task make_task(CollOp op, const char* kind, const CollArgs& args, std::string_view algo,
                 std::string detail = {}) {
    Task t;
    t.op = op;
    t.kind = kind;
    t.args = args;
    t.algo = std::string(algo);
    t.work = std::make_shared<WorkState>();
    WorkState& w = *t.work;
    w.kind = kind;
    w.detail = std::move(detail);
    w.bytes = args.bytes();
    w.dtype = static_cast<uint8_t>(args.dtype);
    w.redop = static_cast<uint8_t>(args.redop);
    w.op = static_cast<uint8_t>(op);
    w.reduces = op == CollOp::Allreduce || op == CollOp::ReduceScatter || op == CollOp::Reduce;
    w.root = args.root;
    w.algo = algo;
    std::lock_guard lock(mu);
    t.seq = ++issued;
    w.seq = t.seq;
    return t;
  }

  std::string select(CollOp op, size_t bytes) const {
    const std::string& pin = !pinned[static_cast<size_t>(op)].empty()
                                 ? pinned[static_cast<size_t>(op)]
                                 : opts.algorithm[static_cast<size_t>(op)];
    std::string_view kind = transport->kind();
    if (!pin.empty() && pin != "auto") {
      const Algorithm* a = find_algorithm(pin);
      if (!a) {
        std::string names;
        for (const auto& x : all_algorithms()) names += (names.empty() ? "" : ", ") + std::string(x.name);
        throw UsageError(fmt::format("unknown algorithm '{}' (known: {})", pin, names));
      }
      if (!a->supports(op, kind))
        throw UsageError(fmt::format("algorithm '{}' cannot run {} over the {} transport", pin,
                                     coll_op_name(op), kind));
      return pin;
    }
    std::vector<std::string> candidates;
    for (const auto& a : all_algorithms()) {
      if (!a.supports(op, kind)) continue;
      // Two levels only help when some node holds several ranks and there are several nodes.
      if (a.name == "hierarchical" && (num_nodes <= 1 || num_nodes >= size())) continue;
      candidates.emplace_back(a.name);
    }
    MT_CHECK(!candidates.empty(), "no algorithm can run {} over {}", coll_op_name(op), kind);
    if (candidates.size() == 1 || size() == 1) return candidates.front();
    return cost.choose(kind, op, bytes, size(), candidates);
  }

  // Selection is pure in (op, bytes, pins), so it is cached per op and size.
  std::array<std::map<size_t, const Algorithm*>, kCollOpCount> selected;
  const Algorithm* select_cached(CollOp op, size_t bytes) {
    auto& cache = selected[static_cast<size_t>(op)];
    std::lock_guard lock(mu);
    auto it = cache.find(bytes);
    if (it != cache.end()) return it->second;
    const Algorithm* a = find_algorithm(select(op, bytes));
    if (cache.size() > 4096) cache.clear();
    cache[bytes] = a;
    return a;
  }

  std::pair<Communicator*, Communicator*> groups(const OpContext& ctx) {
    if (!groups_ready) {
      node_local = std::make_unique<Communicator>(split_now(node_id, rank(), ctx));
      int leader_color = node_local->rank() == 0 ? 0 : -1;
      node_leaders = std::make_unique<Communicator>(split_now(leader_color, rank(), ctx));
      // The levels choose their own algorithms (a pinned "hierarchical" would recurse).
      for (auto* c : {node_local.get(), node_leaders.get()})
        if (c->valid()) {
          c->impl_->pinned = {};
          c->impl_->opts.algorithm = {};
        }
      groups_ready = true;
    }
    return {node_local.get(), node_leaders->valid() ? node_leaders.get() : nullptr};
  }

  // The split itself; runs on the engine (inside a task) on every rank.
  Communicator split_now(int color, int key, const OpContext& ctx);
};


// ---------------------------------------------------------------- creation

namespace {

std::shared_ptr<CommImpl> new_impl(const CommOptions& opts) {
  auto impl = std::make_shared<CommImpl>();
  impl->opts = opts;
  impl->cost = CostModel::load(opts.cost_file.empty() ? CostModel::default_path() : opts.cost_file);
  return impl;
}

// Learns every rank's node and host; sets num_nodes and single_host.
void gather_placement(CommImpl& impl) {
  int32_t mine[2] = {impl.node_id, impl.host_id};
  std::vector<int32_t> all(2 * impl.size());
  impl.transport->allgather_small(mine, sizeof(mine), all.data(), impl.context([] { return std::string("placement exchange"); }));
  std::vector<int32_t> nodes;
  impl.single_host = true;
  for (int r = 0; r < impl.size(); ++r) {
    nodes.push_back(all[2 * r]);
    impl.single_host &= all[2 * r + 1] == all[1];
  }
  std::sort(nodes.begin(), nodes.end());
  impl.num_nodes = static_cast<int>(std::unique(nodes.begin(), nodes.end()) - nodes.begin());
}

}  // namespace

Communicator Communicator::create_local(int rank, int size, const std::string& job_id,
                                        const CommOptions& opts) {
  auto impl = new_impl(opts);
  impl->job_id = sanitize_job_id(job_id);
  impl->name = fmt::format("w{}", g_world_counter++);
  impl->transport = make_transport("shm", {rank, size, impl->job_id, impl->name, opts.timeout_s});
  impl->node_id = opts.node_size > 0 ? rank / opts.node_size : 0;
  impl->host_id = 0;
  gather_placement(*impl);
  return Communicator(impl);
}

Communicator Communicator::from_env(const CommOptions& opts) {
  WorldInfo w = world_from_env();
#if MESHTRAIN_HAVE_MPI
  if (w.under_mpi() || opts.transport == "mpi") {
    mpi::init_once();
    auto impl = new_impl(opts);
    int rank = mpi::world_rank(), size = mpi::world_size();
    impl->job_id = sanitize_job_id(mpi::broadcast_job_id(w.job_id.empty() ? random_job_id() : w.job_id));
    impl->name = fmt::format("w{}", g_world_counter++);
    impl->host_id = mpi::host_id();
    impl->node_id = opts.node_size > 0 ? rank / opts.node_size : impl->host_id;
    bool one_host = mpi::all_on_one_host();
    bool use_shm = opts.transport == "shm" || (opts.transport == "auto" && one_host);
    MT_CHECK(!(opts.transport == "shm" && !one_host),
             "transport 'shm' needs all ranks on one machine; these {} ranks span several", size);
    impl->transport = make_transport(use_shm ? "shm" : "mpi",
                                     {rank, size, impl->job_id, impl->name, opts.timeout_s});
    gather_placement(*impl);
    return Communicator(impl);
  }
#endif
  if (opts.transport == "mpi")
    throw UsageError("transport 'mpi' needs a build with MPI and a launch under mpirun");
  if (opts.transport != "auto" && opts.transport != "shm")
    throw UsageError(fmt::format("unknown transport '{}' (auto, shm, mpi)", opts.transport));
  auto impl = new_impl(opts);
  impl->job_id = sanitize_job_id(w.job_id.empty() && w.size == 1 ? "solo" + std::to_string(getpid()) : w.job_id);
  impl->name = fmt::format("w{}", g_world_counter++);
  impl->transport = make_transport("shm", {w.rank, w.size, impl->job_id, impl->name, opts.timeout_s});
  impl->node_id = opts.node_size > 0 ? w.rank / opts.node_size : w.rank / std::max(1, w.local_size);
  impl->host_id = w.rank / std::max(1, w.local_size);
  gather_placement(*impl);
  return Communicator(impl);
}

Communicator CommImpl::split_now(int color, int key, const OpContext& ctx) {
  int32_t mine[5] = {color, key, rank(), node_id, host_id};
  std::vector<int32_t> all(5 * size());
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
  int my_host = node_id;
  for (int r = 0; r < size(); ++r)
    if (all[5 * r] == color) {
      members.push_back({all[5 * r + 1], r});
      one_host &= all[5 * r + 3] == my_host;
    }
  std::sort(members.begin(), members.end());
  int new_rank = 0;
  for (size_t i = 0; i < members.size(); ++i)
    if (members[i].second == rank()) new_rank = static_cast<int>(i);
  auto child = std::make_shared<CommImpl>();
  child->opts = opts;
  child->cost = cost;
  child->job_id = job_id;
  child->name = fmt::format("{}.{}c{}", name, id, color);
  child->node_id = node_id;
  child->host_id = host_id;
  child->pinned = pinned;
  if (native_child && !one_host) child->transport = std::move(native_child);
  if (!child->transport)
    child->transport = make_transport("shm", {new_rank, static_cast<int>(members.size()), job_id,
                                              child->name, opts.timeout_s});
  gather_placement(*child);
  return Communicator(child);
}

// ---------------------------------------------------------------- accessors

int Communicator::rank() const { return impl_ ? impl_->rank() : -1; }
int Communicator::size() const { return impl_ ? impl_->size() : 0; }
std::string_view Communicator::transport() const { return impl_ ? impl_->transport->kind() : "none"; }
const std::string& Communicator::name() const {
  static const std::string none = "(none)";
  return impl_ ? impl_->name : none;
}
const CostModel& Communicator::cost_model() const { return impl_->cost; }
const CommOptions& Communicator::options() const { return impl_->opts; }

void Communicator::set_algorithm(CollOp op, const std::string& name) {
  MT_CHECK(impl_, "set_algorithm on an invalid communicator");
  std::string n = name == "auto" ? "" : name;
  std::string saved = impl_->pinned[static_cast<size_t>(op)];
  impl_->pinned[static_cast<size_t>(op)] = n;
  impl_->selected[static_cast<size_t>(op)].clear();
  try {
    if (!n.empty()) impl_->select(op, 0);  // validates the name
  } catch (...) {
    impl_->pinned[static_cast<size_t>(op)] = saved;
    throw;
  }
}

std::string Communicator::algorithm_for(CollOp op, size_t bytes) const {
  return impl_->select(op, bytes);
}

std::string Communicator::flight_record() const {
  return impl_->recorder.dump() + impl_->transport->peer_progress();
}

void Communicator::synchronize() {
  MT_CHECK(impl_, "synchronize on an invalid communicator");
  std::unique_lock lock(impl_->mu);
  impl_->cv.wait(lock, [&] { return impl_->queue.empty() && !impl_->busy; });
}

// ---------------------------------------------------------------- operations

Work Communicator::submit(const CollArgs& a) {
  MT_CHECK(impl_, "{} on an invalid communicator (this rank is not in the group)", coll_op_name(a.op));
  CommImpl& im = *impl_;
  const int n = im.size(), me = im.rank();
  bool reduces = a.op == CollOp::Allreduce || a.op == CollOp::ReduceScatter || a.op == CollOp::Reduce;
  if (reduces) check_reducible(a.dtype);
  if (a.count > 0 && a.op != CollOp::Barrier) {
    bool needs_send = a.op != CollOp::Broadcast && a.op != CollOp::Recv;
    bool needs_recv = a.op != CollOp::Send && !(a.op == CollOp::Reduce && me != a.root);
    if (needs_send) MT_CHECK(a.send, "{}: null send buffer", coll_op_name(a.op));
    if (needs_recv) MT_CHECK(a.recv, "{}: null receive buffer", coll_op_name(a.op));
  }
  if (a.op == CollOp::Broadcast || a.op == CollOp::Reduce || a.op == CollOp::Send || a.op == CollOp::Recv)
    if (a.root < 0 || a.root >= n)
      throw UsageError(fmt::format("{}: rank {} is outside the communicator of {} ranks",
                                   coll_op_name(a.op), a.root, n));
  if ((a.op == CollOp::Send || a.op == CollOp::Recv) && a.root == me)
    throw UsageError(fmt::format("{} to itself (rank {})", coll_op_name(a.op), me));

  // Bytes this rank handles: what the cost model and the inline rule look at.
  size_t bytes = a.bytes();
  if (a.op == CollOp::Alltoall) bytes *= n;

  const Algorithm* alg = nullptr;
  if (a.op != CollOp::Send && a.op != CollOp::Recv) alg = im.select_cached(a.op, bytes);
  Task t = im.make_task(a.op, coll_op_name(a.op).data(), a, alg ? alg->name : std::string_view{});
  t.collective = a.op != CollOp::Send && a.op != CollOp::Recv;
  CommImpl* ip = impl_.get();
  t.body = [ip, alg, a, n, me](const OpContext& ctx) {
    if (a.op == CollOp::Send) return ip->transport->send(a.root, a.send, a.bytes(), ctx);
    if (a.op == CollOp::Recv) return ip->transport->recv(a.root, a.recv, a.bytes(), ctx);
    CollArgs run = a;
    if (run.redop == ReduceOp::Avg) run.redop = ReduceOp::Sum;
    AlgoEnv env{*ip->transport, ctx, [ip, &ctx] { return ip->groups(ctx); }};
    alg->run(env, run);
    if (a.redop != ReduceOp::Avg) return;
    if (a.op == CollOp::Allreduce) scale_avg(a.recv, a.count, a.dtype, n);
    if (a.op == CollOp::ReduceScatter) scale_avg(a.recv, block_of(a.count, n, me).count, a.dtype, n);
    if (a.op == CollOp::Reduce && me == a.root) scale_avg(a.recv, a.count, a.dtype, n);
  };
  return im.enqueue(std::move(t), bytes);
}

Work Communicator::allreduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op) {
  return submit({CollOp::Allreduce, send, recv, count, dtype, op, 0});
}
Work Communicator::reduce_scatter(const void* send, void* recv, size_t count, DType dtype, ReduceOp op) {
  return submit({CollOp::ReduceScatter, send, recv, count, dtype, op, 0});
}
Work Communicator::allgather(const void* send, void* recv, size_t count, DType dtype) {
  return submit({CollOp::Allgather, send, recv, count, dtype, ReduceOp::Sum, 0});
}
Work Communicator::broadcast(void* buf, size_t count, DType dtype, int root) {
  return submit({CollOp::Broadcast, buf, buf, count, dtype, ReduceOp::Sum, root});
}
Work Communicator::reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op, int root) {
  return submit({CollOp::Reduce, send, recv, count, dtype, op, root});
}
Work Communicator::alltoall(const void* send, void* recv, size_t count, DType dtype) {
  return submit({CollOp::Alltoall, send, recv, count, dtype, ReduceOp::Sum, 0});
}
Work Communicator::barrier() {
  return submit({CollOp::Barrier, nullptr, nullptr, 0, DType::U8, ReduceOp::Sum, 0});
}
Work Communicator::send(const void* buf, size_t count, DType dtype, int peer) {
  return submit({CollOp::Send, buf, nullptr, count, dtype, ReduceOp::Sum, peer});
}
Work Communicator::recv(void* buf, size_t count, DType dtype, int peer) {
  return submit({CollOp::Recv, nullptr, buf, count, dtype, ReduceOp::Sum, peer});
}

double Communicator::allreduce_scalar(double value, ReduceOp op) {
  allreduce(&value, &value, 1, DType::F64, op).wait();
  return value;
}
int64_t Communicator::allreduce_scalar(int64_t value, ReduceOp op) {
  allreduce(&value, &value, 1, DType::I64, op).wait();
  return value;
}

Communicator Communicator::split(int color, int key) const {
  MT_CHECK(impl_, "split on an invalid communicator");
  CommImpl* ip = impl_.get();
  Task t = ip->make_task(CollOp::Barrier, "split", {CollOp::Barrier, nullptr, nullptr, 0, DType::U8,
                                                    ReduceOp::Sum, 0}, "", fmt::format("color {}, key {}", color, key));
  t.args.count = 0;
  auto result = std::make_shared<Communicator>();
  t.body = [ip, color, key, result](const OpContext& ctx) { *result = ip->split_now(color, key, ctx); };
  ip->enqueue(std::move(t), SIZE_MAX).wait();
  return *result;
}

SharedBuffer Communicator::alloc_shared(size_t bytes) {
  MT_CHECK(impl_, "alloc_shared on an invalid communicator");
  CommImpl* ip = impl_.get();
  Task t = ip->make_task(CollOp::Barrier, "alloc_shared",
                         {CollOp::Barrier, nullptr, nullptr, bytes, DType::U8, ReduceOp::Sum, 0}, "",
                         fmt::format("{} bytes", bytes));
  auto result = std::make_shared<std::shared_ptr<SharedMapping>>();
  t.body = [ip, bytes, result](const OpContext& ctx) { *result = ip->transport->alloc_shared(bytes, ctx); };
  ip->enqueue(std::move(t), SIZE_MAX).wait();
  return SharedBuffer(*result);
}

// ---------------------------------------------------------------- SharedBuffer

Tensor SharedBuffer::tensor(DType dtype, int64_t count, int64_t elem_offset) const {
  MT_CHECK(m_, "tensor() of an empty SharedBuffer");
  auto st = Storage::borrow(m_->local, m_->bytes);
  return Tensor(st, elem_offset, {count}, dtype);
}

}  // namespace meshtrain::comm
