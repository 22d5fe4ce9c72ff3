#include "meshtrain/comm/transports/shm/shm_transport.h"

#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <thread>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "meshtrain/comm/reduce.h"

namespace meshtrain::comm {

using namespace shm;
using Clock = std::chrono::steady_clock;

struct ShmTransport::Registry {
  std::mutex mu;
  struct Entry {
    std::vector<char*> bases;
    size_t bytes;
  };
  std::map<int64_t, Entry> buffers;
};

ShmMapping::~ShmMapping() {
  if (on_free) on_free(id);
  std::free(private_memory);
}

namespace {

// One spin of the wait loop; spin_limit_ counts these before yielding.
// aarch64 uses ISB, as other spin loops there do: YIELD is a hint that Arm's
// Neoverse cores retire at once, which would make the spin phase far shorter
// than x86's PAUSE makes it (the ratio is not measured on Arm hardware here).
void cpu_relax() {
#if defined(__x86_64__)
  _mm_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("isb" ::: "memory");
#endif
}

// A process that exited but was not reaped yet still answers kill(pid, 0).
bool process_alive(int pid) {
  if (pid <= 0) return true;
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(f, line)) return true;
  auto close = line.rfind(')');
  if (close == std::string::npos || close + 2 >= line.size()) return true;
  char state = line[close + 2];
  return state != 'Z' && state != 'X';
}

size_t chunk_bytes_from_env() {
  if (const char* s = std::getenv("MESHTRAIN_SHM_CHUNK_BYTES")) {
    long long v = std::atoll(s);
    if (v >= 4096) return round_up(static_cast<size_t>(v), kPage);
  }
  return kDefaultChunkBytes;
}

}  // namespace

// The point-to-point view: the same segment, its own channels and cursors.
class ShmTransport::P2pLane final : public Transport {
 public:
  explicit P2pLane(ShmTransport& t) : t_(t) {}
  int rank() const override { return t_.rank_; }
  int size() const override { return t_.size_; }
  std::string_view kind() const override { return "shm"; }
  void exchange(std::span<const SendSpec> sends, std::span<const RecvSpec> recvs,
                const OpContext& ctx) override {
    t_.exchange_on(t_.lanes_[1], sends, recvs, ctx);
  }
  void barrier(const OpContext& ctx) override { no_collectives(ctx); }
  void allgather_small(const void*, size_t, void*, const OpContext& ctx) override { no_collectives(ctx); }
  void abort(const std::string& reason) override { t_.abort(reason); }
  std::string peer_progress() const override { return t_.peer_progress(); }

 private:
  [[noreturn]] static void no_collectives(const OpContext& ctx) {
    fail("{}: the point-to-point lane carries only sends and receives", ctx.what());
  }
  ShmTransport& t_;
};

ShmTransport::ShmTransport(int rank, int size, const std::string& job_id,
                           const std::string& comm_name, double timeout_s)
    : rank_(rank), size_(size), job_id_(job_id), comm_name_(comm_name),
      registry_(std::make_shared<Registry>()) {
  MT_CHECK(size >= 1 && rank >= 0 && rank < size, "bad rank {} of {}", rank, size);
  layout_ = Layout::make(size, chunk_bytes_from_env());
  // Spinning pays only when every rank has a core; oversubscribed ranks yield at once.
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  spin_limit_ = size <= cores ? 20000 : 64;
  for (int lane = 0; lane < kLanes; ++lane) {
    lanes_[lane].index = lane;
    lanes_[lane].sent.assign(size, 0);
    lanes_[lane].received.assign(size, 0);
  }
  p2p_ = std::make_unique<P2pLane>(*this);
  std::string joining = fmt::format("joining communicator '{}' ({} ranks)", comm_name, size);
  OpContext ctx{[joining] { return joining; }, timeout_s};
  ctx.deadline();  // joining counts from now
  if (size == 1) {
    private_memory_ = static_cast<char*>(std::aligned_alloc(kPage, layout_.total));
    MT_CHECK(private_memory_, "out of memory for a communicator of 1 rank");
    std::memset(private_memory_, 0, layout_.total);
    base_ = private_memory_;
  } else {
    MT_CHECK(!job_id.empty(),
             "a communicator of {} ranks needs a job id (MESHTRAIN_JOB_ID; `meshtrain launch` sets it)",
             size);
    std::string name = shm_name(job_id, comm_name);
    segment_ = rank == 0 ? ShmSegment::create(name, layout_.total) : ShmSegment::open(name, ctx.deadline());
    MT_CHECK(segment_.bytes() == layout_.total,
             "shared memory {} has {} bytes, expected {} (do all ranks use the same "
             "MESHTRAIN_SHM_CHUNK_BYTES?)", name, segment_.bytes(), layout_.total);
    base_ = static_cast<char*>(segment_.data());
  }
  __atomic_store_n(&control(rank).pid, static_cast<int32_t>(getpid()), __ATOMIC_RELAXED);
  sync(ctx);  // everyone has mapped the segment: its name can go
  segment_.unlink();
}

ShmTransport::~ShmTransport() { std::free(private_memory_); }

char* ShmTransport::region(int r) const {
  return base_ + layout_.global_bytes + static_cast<size_t>(r) * layout_.rank_bytes;
}
RankControl& ShmTransport::control(int r) const { return *reinterpret_cast<RankControl*>(region(r)); }
char* ShmTransport::small_slot(int r, uint64_t parity) const {
  return region(r) + layout_.small_off + (parity & 1) * kSmallBytes;
}
char* ShmTransport::scratch(int r, int index) const {
  return region(r) + layout_.scratch_off + static_cast<size_t>(index) * layout_.chunk_bytes;
}
ChannelHeader& ShmTransport::channel(int lane, int receiver, int sender) const {
  return *reinterpret_cast<ChannelHeader*>(region(receiver) + layout_.chan_off[lane] +
                                           static_cast<size_t>(sender) * layout_.chan_bytes);
}
char* ShmTransport::channel_slots(int lane, int receiver, int sender) const {
  return reinterpret_cast<char*>(&channel(lane, receiver, sender)) + kPage;
}


void ShmTransport::note_op(CollOp op, uint64_t seq) {
  RankControl& c = control(rank_);
  __atomic_store_n(&c.op_code, static_cast<uint32_t>(op), __ATOMIC_RELAXED);
  __atomic_store_n(&c.op_seq, seq, __ATOMIC_RELAXED);
}
void ShmTransport::note_done() {
  RankControl& c = control(rank_);
  // Only this rank writes it: a plain increment, no locked instruction on
  // every operation (peers only read it for reports).
  __atomic_store_n(&c.ops_done, __atomic_load_n(&c.ops_done, __ATOMIC_RELAXED) + 1, __ATOMIC_RELAXED);
}

std::string ShmTransport::peer_progress() const {
  std::string out;
  for (int r = 0; r < size_; ++r) {
    RankControl& c = control(r);
    uint64_t done = __atomic_load_n(&c.ops_done, __ATOMIC_RELAXED);
    uint64_t seq = __atomic_load_n(&c.op_seq, __ATOMIC_RELAXED);
    auto op = static_cast<CollOp>(__atomic_load_n(&c.op_code, __ATOMIC_RELAXED));
    out += fmt::format("  rank {}: {} ops done; last started: {} #{}\n", r, done,
                       op < CollOp::kCount ? coll_op_name(op) : "?", seq);
  }
  return out;
}

void ShmTransport::abort(const std::string& reason) {
  if (size_ == 1) return;
  RankControl& c = control(rank_);
  std::strncpy(c.abort_reason, reason.c_str(), sizeof(c.abort_reason) - 1);
  auto& g = *reinterpret_cast<GlobalControl*>(base_);
  int32_t expected = 0;
  g.aborted_by.compare_exchange_strong(expected, rank_ + 1, std::memory_order_release);
}

void ShmTransport::check_abort(const OpContext& ctx) const {
  auto& g = *reinterpret_cast<GlobalControl*>(base_);
  int32_t by = g.aborted_by.load(std::memory_order_acquire);
  if (by != 0 && by != rank_ + 1) {
    int r = by - 1;
    throw CommError(fmt::format("{}: stopped because rank {} failed: {}", ctx.what(), r,
                                control(r).abort_reason));
  }
}

void ShmTransport::fail_waiting(int peer, const OpContext& ctx, bool dead) {
  RankControl& c = control(peer);
  uint64_t seq = __atomic_load_n(&c.op_seq, __ATOMIC_RELAXED);
  auto op = static_cast<CollOp>(__atomic_load_n(&c.op_code, __ATOMIC_RELAXED));
  uint64_t done = __atomic_load_n(&c.ops_done, __ATOMIC_RELAXED);
  std::string where = done == 0 && seq == 0
                          ? "it has not started any operation"
                          : fmt::format("its last operation was {} #{}, {} done",
                                        op < CollOp::kCount ? coll_op_name(op) : "?", seq, done);
  std::string msg =
      dead ? fmt::format("{}: rank {} (pid {}) died ({})", ctx.what(), peer, c.pid, where)
           : fmt::format("{}: timed out after {:.1f} s waiting for rank {} ({})", ctx.what(),
                         ctx.timeout_s, peer, where);
  abort(msg);
  throw CommError(msg);
}

// Test hook: MESHTRAIN_SHM_TEST_STALL_US=D sleeps D microseconds between a
// waiter's last look at a peer and its liveness check of that peer, emulating
// a waiter preempted there on a loaded machine (the peer may finish and exit
// meanwhile). Read once.
static long stall_before_liveness_check_us() {
  static const long us = [] {
    const char* s = std::getenv("MESHTRAIN_SHM_TEST_STALL_US");
    return s ? std::max(0L, std::atol(s)) : 0L;
  }();
  return us;
}

ShmTransport::Stall ShmTransport::idle(int& spins, Clock::time_point& last_check, int peer,
                                       const OpContext& ctx) {
  ++spins;
  if (spins < spin_limit_) {
    cpu_relax();
    if ((spins & 1023) == 0) check_abort(ctx);
    return Stall::None;
  }
  check_abort(ctx);
  // Yield to a rank that shares our core; sleep once waiting is clearly long.
  if (spins < spin_limit_ + 2000) {
    sched_yield();
  } else {
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  if ((spins & 63) != 0) return Stall::None;
  auto now = Clock::now();
  if (now > ctx.deadline()) return Stall::TimedOut;
  if (last_check == Clock::time_point{}) last_check = now;  // callers start it unset
  if (now - last_check > std::chrono::milliseconds(20)) {
    last_check = now;
    if (long us = stall_before_liveness_check_us())
      std::this_thread::sleep_for(std::chrono::microseconds(us));
    if (peer >= 0 && !process_alive(__atomic_load_n(&control(peer).pid, __ATOMIC_RELAXED)))
      return Stall::PeerExited;
  }
  return Stall::None;
}

void ShmTransport::sync(const OpContext& ctx) {
  ++step_;
  control(rank_).arrived.value.store(step_, std::memory_order_release);
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    auto reached = [&] { return control(p).arrived.value.load(std::memory_order_acquire) >= step_; };
    int spins = 0;
    Clock::time_point last_check{};  // set by idle() once spinning is over: no clock read before
    while (!reached()) {
      Stall s = idle(spins, last_check, p, ctx);
      // Everything an exited peer wrote is visible now: if it arrived before
      // exiting, it did its part and is not a failure.
      if (s != Stall::None && !reached()) fail_waiting(p, ctx, s == Stall::PeerExited);
    }
  }
}

void ShmTransport::sync_tiny(const void* mine, size_t bytes, const OpContext& ctx) {
  MT_CHECK(bytes <= kTinyBytes, "sync_tiny of {} bytes exceeds {}", bytes, kTinyBytes);
  ++step_;
  // A peer reads a line's data only after seeing this step in that line; the
  // lines are rewritten two steps later, after every peer has passed the next step.
  const size_t lines = std::max<size_t>(1, (bytes + kTinyLineBytes - 1) / kTinyLineBytes);
  TinyLine* out = control(rank_).tiny[step_ & 1];
  const char* src = static_cast<const char*>(mine);
  for (size_t i = 0; i < lines; ++i) {
    const size_t off = i * kTinyLineBytes;
    std::memcpy(out[i].data, src + off, std::min(kTinyLineBytes, bytes - off));
    out[i].step.store(step_, std::memory_order_release);
  }
  control(rank_).arrived.value.store(step_, std::memory_order_release);
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    const TinyLine* theirs = control(p).tiny[step_ & 1];
    // Every line is loaded on each poll (no early exit), so their transfers overlap.
    auto reached = [&] {
      bool all = true;
      for (size_t i = 0; i < lines; ++i) all &= theirs[i].step.load(std::memory_order_acquire) >= step_;
      return all;
    };
    int spins = 0;
    Clock::time_point last_check{};
    while (!reached()) {
      Stall s = idle(spins, last_check, p, ctx);
      if (s != Stall::None && !reached()) fail_waiting(p, ctx, s == Stall::PeerExited);
    }
  }
}

const char* ShmTransport::tiny_data(int r) const { return control(r).tiny[step_ & 1][0].data; }

void ShmTransport::copy_tiny_data(int r, void* dst, size_t bytes) const {
  const TinyLine* lines = control(r).tiny[step_ & 1];
  char* d = static_cast<char*>(dst);
  for (size_t off = 0, i = 0; off < bytes; off += kTinyLineBytes, ++i)
    std::memcpy(d + off, lines[i].data, std::min(kTinyLineBytes, bytes - off));
}

void ShmTransport::allgather_small(const void* mine, size_t bytes, void* all, const OpContext& ctx) {
  MT_CHECK(bytes <= kSmallBytes, "allgather_small of {} bytes exceeds {}", bytes, kSmallBytes);
  uint64_t parity = (step_ + 1) & 1;
  std::memcpy(small_slot(rank_, parity), mine, bytes);
  sync(ctx);
  for (int r = 0; r < size_; ++r)
    std::memcpy(static_cast<char*>(all) + r * bytes, small_slot(r, parity), bytes);
}

void ShmTransport::exchange_on(Lane& lane, std::span<const SendSpec> sends,
                               std::span<const RecvSpec> recvs, const OpContext& ctx) {
  std::vector<uint64_t>& sent_ = lane.sent;
  std::vector<uint64_t>& received_ = lane.received;
  std::vector<size_t> sdone(sends.size(), 0), rdone(recvs.size(), 0);
  int spins = 0;
  Clock::time_point last_check{};  // set by idle() once spinning is over
  int stalled_on = -1;  // the peer idle() gave up on, checked by one more pass
  Stall stall = Stall::None;
  auto blocked_by = [&](int peer) {
    for (size_t i = 0; i < sends.size(); ++i)
      if (sends[i].peer == peer && sdone[i] < sends[i].bytes) return true;
    for (size_t i = 0; i < recvs.size(); ++i)
      if (recvs[i].peer == peer && rdone[i] < recvs[i].bytes) return true;
    return false;
  };
  for (;;) {
    bool finished = true, progress = false;
    int blocking = -1;
    for (size_t i = 0; i < sends.size(); ++i) {
      const SendSpec& s = sends[i];
      if (sdone[i] == s.bytes) continue;
      if (s.peer == rank_) fail("{}: send to self", ctx.what());
      ChannelHeader& ch = channel(lane.index, s.peer, rank_);
      char* slots = channel_slots(lane.index, s.peer, rank_);
      while (sdone[i] < s.bytes) {
        if (sent_[s.peer] - ch.tail.value.load(std::memory_order_acquire) >= kSlots) break;
        size_t n = std::min(kSlotBytes, s.bytes - sdone[i]);
        std::memcpy(slots + (sent_[s.peer] % kSlots) * kSlotBytes,
                    static_cast<const char*>(s.data) + sdone[i], n);
        sdone[i] += n;
        ch.head.value.store(++sent_[s.peer], std::memory_order_release);
        progress = true;
      }
      if (sdone[i] < s.bytes) {
        finished = false;
        blocking = s.peer;
      }
    }
    for (size_t i = 0; i < recvs.size(); ++i) {
      const RecvSpec& r = recvs[i];
      if (rdone[i] == r.bytes) continue;
      ChannelHeader& ch = channel(lane.index, rank_, r.peer);
      char* slots = channel_slots(lane.index, rank_, r.peer);
      while (rdone[i] < r.bytes) {
        if (ch.head.value.load(std::memory_order_acquire) <= received_[r.peer]) break;
        size_t n = std::min(kSlotBytes, r.bytes - rdone[i]);
        const char* slot = slots + (received_[r.peer] % kSlots) * kSlotBytes;
        char* dst = static_cast<char*>(r.data) + rdone[i];
        if (r.reduce)
          reduce_into(dst, slot, n / dtype_size(r.dtype), r.dtype, r.op);
        else
          std::memcpy(dst, slot, n);
        rdone[i] += n;
        ch.tail.value.store(++received_[r.peer], std::memory_order_release);
        progress = true;
      }
      if (rdone[i] < r.bytes) {
        finished = false;
        blocking = r.peer;
      }
    }
    if (finished) return;
    if (progress) {
      spins = 0;
      stalled_on = -1;
    } else if (stalled_on >= 0 && blocked_by(stalled_on)) {
      // A pass after the stall made no progress and still needs that peer.
      fail_waiting(stalled_on, ctx, stall == Stall::PeerExited);
    } else {
      // An exited sender's last slots may still be unread: look once more
      // before failing (see sync).
      stall = idle(spins, last_check, blocking, ctx);
      stalled_on = stall == Stall::None ? -1 : blocking;
    }
  }
}

int ShmTransport::next_scratch(const OpContext& ctx) {
  int index = scratch_next_;
  scratch_next_ = (scratch_next_ + 1) % kScratchBuffers;
  // Peers finish reading a buffer before they arrive at the second step after
  // the one that published it; if we have not passed that step, sync first.
  while (scratch_step_[index] != 0 && step_ < scratch_step_[index] + 2) sync(ctx);
  return index;
}

std::optional<DataRef> ShmTransport::find_shared(const void* p, size_t bytes) const {
  std::lock_guard lock(registry_->mu);
  auto* c = static_cast<const char*>(p);
  for (auto& [id, e] : registry_->buffers) {
    const char* b = e.bases[rank_];
    if (c >= b && c + bytes <= b + e.bytes) return DataRef{id, static_cast<uint64_t>(c - b)};
  }
  return std::nullopt;
}

char* ShmTransport::resolve(int r, const DataRef& ref, int scratch_index) const {
  if (ref.buffer_id < 0) return scratch(r, scratch_index);
  std::lock_guard lock(registry_->mu);
  auto it = registry_->buffers.find(ref.buffer_id);
  MT_CHECK(it != registry_->buffers.end(), "rank {} uses shared buffer {} that this rank freed",
           r, ref.buffer_id);
  return it->second.bases[r] + ref.offset;
}

std::shared_ptr<SharedMapping> ShmTransport::alloc_shared(size_t bytes, const OpContext& ctx) {
  auto m = std::make_shared<ShmMapping>();
  m->id = next_buffer_id_++;
  m->bytes = bytes;
  size_t mapped = std::max<size_t>(round_up(bytes, kPage), kPage);
  if (size_ == 1) {
    m->private_memory = static_cast<char*>(std::aligned_alloc(kPage, mapped));
    MT_CHECK(m->private_memory, "out of memory allocating {} shared bytes", bytes);
    std::memset(m->private_memory, 0, mapped);
    m->bases = {m->private_memory};
  } else {
    auto name = [&](int r) {
      return shm_name(job_id_, fmt::format("{}-b{}-r{}", comm_name_, m->id, r));
    };
    m->segments.resize(size_);
    m->segments[rank_] = ShmSegment::create(name(rank_), mapped);
    sync(ctx);
    for (int r = 0; r < size_; ++r)
      if (r != rank_) m->segments[r] = ShmSegment::open(name(r), ctx.deadline());
    sync(ctx);
    m->segments[rank_].unlink();
    for (auto& s : m->segments) m->bases.push_back(static_cast<char*>(s.data()));
  }
  m->local = m->bases[rank_];
  m->peers.assign(m->bases.begin(), m->bases.end());
  {
    std::lock_guard lock(registry_->mu);
    registry_->buffers[m->id] = {m->bases, mapped};
  }
  std::weak_ptr<Registry> reg = registry_;
  m->on_free = [reg](int64_t id) {
    if (auto r = reg.lock()) {
      std::lock_guard lock(r->mu);
      r->buffers.erase(id);
    }
  };
  return m;
}

}  // namespace meshtrain::comm
