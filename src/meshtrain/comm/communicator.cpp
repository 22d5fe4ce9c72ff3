#include "meshtrain/comm/communicator.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "meshtrain/comm/comm_impl.h"
#include "meshtrain/core/debug_log.h"
#include "meshtrain/comm/reduce.h"
#include "meshtrain/comm/wire_bytes.h"

namespace meshtrain::comm {

namespace {

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

// Test hook: MESHTRAIN_COMM_TEST_DELAY_US=D sleeps D microseconds before
// every allreduce (on whichever thread runs it), emulating a slow network so
// tests can show data parallelism overlapping communication with backward.
// MESHTRAIN_COMM_TEST_DELAY_OPS="broadcast,send" delays those ops instead
// (the distributed multiply's look-ahead test). MESHTRAIN_COMM_TEST_DELAY_RANK=R
// delays only the communicators' rank R (a rank that hangs, for the flight
// record's tests).
void test_delay(CollOp op, int rank) {
  static const int only_rank = [] {
    const char* s = std::getenv("MESHTRAIN_COMM_TEST_DELAY_RANK");
    return s && *s ? std::atoi(s) : -1;
  }();
  if (only_rank >= 0 && rank != only_rank) return;
  static const long us = [] {
    const char* s = std::getenv("MESHTRAIN_COMM_TEST_DELAY_US");
    return s ? std::max(0L, std::atol(s)) : 0L;
  }();
  if (us <= 0) return;
  static const std::array<bool, kCollOpCount> delayed = [] {
    std::array<bool, kCollOpCount> d{};
    const char* s = std::getenv("MESHTRAIN_COMM_TEST_DELAY_OPS");
    std::string list = s ? s : "allreduce";
    size_t at = 0;
    while (at <= list.size()) {
      size_t end = list.find(',', at);
      if (end == std::string::npos) end = list.size();
      if (end > at) d[static_cast<size_t>(coll_op_from_name(list.substr(at, end - at)))] = true;
      at = end + 1;
    }
    return d;
  }();
  if (delayed[static_cast<size_t>(op)]) std::this_thread::sleep_for(std::chrono::microseconds(us));
}

// CommOptions::throttle_gbps: sleeps out what is left of the time the op's
// bytes take at the throttled rate, counted from `start`.
void throttle(CollOp op, size_t bytes, int ranks, double gbps, std::chrono::steady_clock::time_point start) {
  const double need_s = bytes_sent_per_rank(op, bytes, ranks) / (gbps * 1e9);
  const auto until = start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                 std::chrono::duration<double>(need_s));
  std::this_thread::sleep_until(until);
}

}  // namespace

// ---------------------------------------------------------------- running

void CommImpl::debug_check(const Task& t, const OpContext& ctx) {
  Fingerprint mine{};
  std::snprintf(mine.kind, sizeof(mine.kind), "%s", t.kind);
  std::snprintf(mine.algo, sizeof(mine.algo), "%.*s", static_cast<int>(t.algo.size()), t.algo.data());
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

void CommImpl::record_failure(const Task& t, const std::exception& e) {
  std::lock_guard lock(fail_mu);
  if (!broken.empty()) return;
  broken = e.what();
  is_broken.store(true, std::memory_order_release);
  transport->abort(broken);
  if (reported) return;
  reported = true;
  std::fprintf(stderr, "[rank %d] comm error: %s\n[rank %d] last operations:\n%s", rank(), e.what(),
               rank(), recorder.dump().c_str());
  MT_LOG(Warn, Comm, "communicator '{}' failed: {}; last operations:\n{}", name, e.what(), recorder.dump());
  std::string peers = transport->peer_progress();
  if (!peers.empty()) std::fprintf(stderr, "[rank %d] progress of all ranks:\n%s", rank(), peers.c_str());
}

void CommImpl::run(Task& t) {
  const OpInfo* info = &t.info;
  // No clock read on this path: the deadline starts at the first stalled
  // wait (OpContext::deadline) and the flight record uses the cycle counter.
  OpContext ctx = context([info, this] { return fmt::format("{} on '{}'", info->what(), name); });
  // Progress markers are the collectives' (one writer); sends and receives
  // on their own lanes only enter the flight record.
  const bool marks = t.collective || !p2p;
  if (marks) transport->note_op(t.op, t.seq);
  // Only a queued operation has its Work state already (an inline one gets
  // none unless it fails): this marks it as begun on the engine's thread.
  if (t.work) t.work->started.store(true, std::memory_order_release);
  // Recording copies the op's description, which may allocate: inside the
  // try, so a failure there still finishes the Work.
  uint64_t entry = FlightRecorder::kNoEntry;
  try {
    entry = recorder.started(t.info);
    MT_LOG(Trace, Comm, "'{}': {}{}{}", name, t.info.what(), t.alg ? " with " : "",
           t.alg ? std::string(t.alg->name) : std::string());
    if (is_broken.load(std::memory_order_acquire)) {
      std::lock_guard lock(fail_mu);
      throw CommError(fmt::format("{}: communicator unusable after an earlier failure: {}",
                                  t.info.what(), broken));
    }
    if (opts.debug && t.collective && size() > 1) debug_check(t, ctx);
    test_delay(t.op, rank());
    const bool throttled = opts.throttle_gbps > 0;
    const auto start = throttled ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
    if (t.alg)
      run_algorithm(t, ctx);
    else
      t.body(ctx);
    if (throttled) throttle(t.op, t.args.bytes(), size(), opts.throttle_gbps, start);
    recorder.finished(entry, true);
    if (marks) transport->note_done();
    if (t.work) t.work->finish();
  } catch (const std::exception& e) {
    if (entry != FlightRecorder::kNoEntry) recorder.finished(entry, false);
    record_failure(t, e);
    if (!t.work) t.work = new_work_state(t.info);  // the caller learns of the error through it
    t.work->finish(std::current_exception());
  }
}

std::shared_ptr<WorkState> CommImpl::new_work_state(const OpInfo& info) {
  auto s = std::make_shared<WorkState>();
  s->info = info;
  return s;
}

Work CommImpl::enqueue(Task task, size_t inline_bytes) {
  number(task);
  // Small collectives on an idle lane run here and now; a success needs no
  // Work state, only its sequence number (the latency of small allreduces).
  if (inline_bytes <= opts.inline_bytes && engine.try_run_inline(task))
    return task.work ? Work(task.work) : Work::completed(task.info.seq, task.info.kind);
  const CollOp op = task.op;
  try {
    task.work = new_work_state(task.info);
    Work work(task.work);
    engine.submit(std::move(task));
    return work;
  } catch (...) {  // out of memory: the op was never issued
    give_back_number(op);
    throw;
  }
}

Work CommImpl::enqueue_p2p(Task task) {
  number(task);
  const CollOp op = task.op;
  try {
    task.work = new_work_state(task.info);
    Work work(task.work);
    ProgressEngine<Task>* lane;
    {
      std::lock_guard lock(lanes_mu);
      auto& slot = peer_lanes[{task.args.root, task.op}];
      if (!slot) slot = std::make_unique<ProgressEngine<Task>>([this](Task& t) { run(t); });
      lane = slot.get();
    }
    // Never on the caller: a blocking send must not stall the receive the
    // caller issues next (two ranks sending to each other first would deadlock).
    lane->submit(std::move(task));
    return work;
  } catch (...) {  // out of memory: the op was never issued
    give_back_number(op);
    throw;
  }
}

namespace {
// Collectives count apart from sends and receives, so their numbers match
// on every rank (the debug check compares them) whatever p2p a rank did.
bool numbered_as_p2p(CollOp op) { return op == CollOp::Send || op == CollOp::Recv; }
}  // namespace

void CommImpl::number(Task& t) {
  t.seq = numbered_as_p2p(t.op) ? ++p2p_issued : ++issued;
  t.info.seq = t.seq;
}

void CommImpl::give_back_number(CollOp op) {
  // Ops are numbered in issue order by the one thread that issues them, and
  // nothing between number() and here issues another, so the number taken
  // last is this op's: giving it back keeps this rank's numbers in step with
  // its peers' (the debug check and reports compare them).
  (numbered_as_p2p(op) ? p2p_issued : issued).fetch_sub(1, std::memory_order_relaxed);
}

void CommImpl::synchronize() {
  engine.drain();
  std::lock_guard lock(lanes_mu);
  for (auto& [key, lane] : peer_lanes) lane->drain();
}

// `kind` must be a string literal or static name; `detail` replaces the
// standard description (rare ops only).
void CommImpl::run_algorithm(const Task& t, const OpContext& ctx) {
  const CollArgs& a = t.args;
  CollArgs run = a;
  if (run.redop == ReduceOp::Avg) run.redop = ReduceOp::Sum;
  AlgoEnv env{*transport, ctx, [this, &ctx] { return groups(ctx); }};
  t.alg->run(env, run);
  if (a.redop != ReduceOp::Avg) return;
  const int n = size(), me = rank();
  if (a.op == CollOp::Allreduce) scale_avg(a.recv, a.count, a.dtype, n);
  if (a.op == CollOp::ReduceScatter) scale_avg(a.recv, block_of(a.count, n, me).count, a.dtype, n);
  if (a.op == CollOp::Reduce && me == a.root) scale_avg(a.recv, a.count, a.dtype, n);
}

// `kind` must be a string literal or static name; `detail` replaces the
// standard description (rare ops only).
Task CommImpl::make_task(CollOp op, const char* kind, const CollArgs& args, std::string_view algo,
                         std::string detail) {
  Task t;
  t.op = op;
  t.kind = kind;
  t.args = args;
  t.algo = algo;
  OpInfo& w = t.info;
  w.kind = kind;
  w.detail = std::move(detail);
  w.bytes = args.bytes();
  w.dtype = static_cast<uint8_t>(args.dtype);
  w.redop = static_cast<uint8_t>(args.redop);
  w.op = static_cast<uint8_t>(op);
  w.reduces = op == CollOp::Allreduce || op == CollOp::ReduceScatter || op == CollOp::Reduce;
  w.root = args.root;
  w.algo = algo;
  return t;  // numbered when it is issued (enqueue, enqueue_p2p)
}

std::pair<Communicator*, Communicator*> CommImpl::groups(const OpContext& ctx) {
  if (!groups_ready) {
    node_local = std::make_unique<Communicator>(split_now(placement.node_id, rank(), ctx));
    int leader_color = node_local->rank() == 0 ? 0 : -1;
    node_leaders = std::make_unique<Communicator>(split_now(leader_color, rank(), ctx));
    for (auto* c : {node_local.get(), node_leaders.get()})
      if (c->valid()) c->impl_->selector.unpin_all();
    groups_ready = true;
  }
  return {node_local.get(), node_leaders->valid() ? node_leaders.get() : nullptr};
}

// ---------------------------------------------------------------- accessors

int Communicator::rank() const { return impl_ ? impl_->rank() : -1; }
int Communicator::node_id() const { return impl_ ? impl_->placement.node_id : 0; }
int Communicator::size() const { return impl_ ? impl_->size() : 0; }
std::string_view Communicator::transport() const { return impl_ ? impl_->transport->kind() : "none"; }
const std::string& Communicator::name() const {
  static const std::string none = "(none)";
  return impl_ ? impl_->name : none;
}
const CostModel& Communicator::cost_model() const { return impl_->selector.cost_model(); }
const CommOptions& Communicator::options() const { return impl_->opts; }

void Communicator::set_algorithm(CollOp op, const std::string& name) {
  MT_CHECK(impl_, "set_algorithm on an invalid communicator");
  impl_->selector.pin(op, name);
}

std::string Communicator::algorithm_for(CollOp op, size_t bytes) const {
  return impl_->selector.choose(op, bytes);
}

std::string Communicator::flight_record() const {
  return impl_->recorder.dump() + impl_->transport->peer_progress();
}

CommCounters Communicator::counters() const {
  CommCounters c;
  if (!impl_) return c;
  for (size_t i = 0; i < kCollOpCount; ++i) {
    c.calls[i] = impl_->calls[i].load(std::memory_order_relaxed);
    c.bytes[i] = impl_->bytes_issued[i].load(std::memory_order_relaxed);
  }
  return c;
}

void Communicator::synchronize() {
  MT_CHECK(impl_, "synchronize on an invalid communicator");
  impl_->synchronize();
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

  // Plain load + store, no locked instruction on the latency path: a
  // communicator's operations are issued from one thread at a time.
  auto bump = [](std::atomic<uint64_t>& x, uint64_t by) {
    x.store(x.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
  };
  // Counted once issued: an op whose issue runs out of memory leaves no trace.
  auto counted = [&](Work w) {
    bump(im.calls[static_cast<size_t>(a.op)], 1);
    bump(im.bytes_issued[static_cast<size_t>(a.op)], a.bytes());
    return w;
  };
  // Bytes this rank handles: what the cost model and the inline rule look at.
  size_t bytes = a.bytes();
  if (a.op == CollOp::Alltoall) bytes *= n;

  if (a.op == CollOp::Send || a.op == CollOp::Recv) {
    Task t = im.make_task(a.op, coll_op_name(a.op).data(), a, {});
    t.collective = false;
    Transport* lane = im.p2p ? im.p2p : im.transport.get();
    t.body = [lane, a](const OpContext& ctx) {
      if (a.op == CollOp::Send) return lane->send(a.root, a.send, a.bytes(), ctx);
      lane->recv(a.root, a.recv, a.bytes(), ctx);
    };
    return counted(im.p2p ? im.enqueue_p2p(std::move(t)) : im.enqueue(std::move(t), bytes));
  }
  const Algorithm* alg = im.selector.select(a.op, bytes);
  Task t = im.make_task(a.op, coll_op_name(a.op).data(), a, alg->name);
  t.alg = alg;
  return counted(im.enqueue(std::move(t), bytes));
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

Communicator Communicator::split(int color, int key) const { return split(color, key, 0); }

Communicator Communicator::split(int color, int key, double timeout_s) const {
  MT_CHECK(impl_, "split on an invalid communicator");
  CommImpl* ip = impl_.get();
  Task t = ip->make_task(CollOp::Barrier, "split", {CollOp::Barrier, nullptr, nullptr, 0, DType::U8,
                                                    ReduceOp::Sum, 0}, "", fmt::format("color {}, key {}", color, key));
  t.args.count = 0;
  auto result = std::make_shared<Communicator>();
  t.body = [ip, color, key, timeout_s, result](const OpContext& ctx) {
    *result = ip->split_now(color, key, ctx, timeout_s);
  };
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
