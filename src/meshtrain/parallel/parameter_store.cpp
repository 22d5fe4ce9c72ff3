#include "meshtrain/parallel/parameter_store.h"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>

#include <fmt/format.h>

#include "meshtrain/core/error.h"

namespace meshtrain::parallel {

bool may_apply(int64_t version, std::span<const WorkerView> workers, int64_t staleness) {
  for (const WorkerView& w : workers)
    if (w.computing && version + 1 - w.base > staleness) return false;
  return true;
}

std::vector<ElemSpan> shard_spans(int64_t numel, const std::vector<int64_t>& boundaries, int workers) {
  MT_CHECK(workers >= 1, "a parameter store needs at least one worker");
  std::vector<int64_t> cuts = {0};
  for (int k = 1; k < workers; ++k) {
    // An equal split of what is left, so one early cut does not starve the rest.
    const int64_t target = cuts.back() + (numel - cuts.back()) / (workers - k + 1);
    int64_t best = cuts.back();
    for (int64_t b : boundaries)  // the tensor start nearest the equal split, never behind the last cut
      if (b >= cuts.back() && b <= numel && std::llabs(b - target) < std::llabs(best - target)) best = b;
    cuts.push_back(best);
  }
  cuts.push_back(numel);
  std::vector<ElemSpan> out;
  for (int k = 0; k < workers; ++k) out.push_back({cuts[static_cast<size_t>(k)], cuts[static_cast<size_t>(k) + 1]});
  return out;
}

namespace {

constexpr int64_t kAlign = 64;
int64_t round_up(int64_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

// One worker as a shard records it (shared memory, under the shard's lock).
struct WorkerRecord {
  int64_t base = 0;
  int32_t computing = 0, pending = 0, valid = 0;
  float lr = 0;
};

// The start of each shard's segment (shared memory).
struct ShardHeader {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int64_t version;
  int64_t updates, gradients, staleness_sum, staleness_max;
  std::atomic<int64_t> tickets;  // rank 0's segment only: the run's step tickets
  int32_t broken;                // a worker died holding the lock
};
static_assert(std::atomic<int64_t>::is_always_lock_free, "tickets shared between processes need lock-free atomics");

timespec deadline_after(double seconds) {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  const auto whole = static_cast<time_t>(seconds);
  t.tv_sec += whole;
  t.tv_nsec += static_cast<long>((seconds - static_cast<double>(whole)) * 1e9);
  if (t.tv_nsec >= 1000000000L) {
    t.tv_sec += 1;
    t.tv_nsec -= 1000000000L;
  }
  return t;
}

}  // namespace

struct ParameterStore::Shard {
  ShardHeader* h = nullptr;
  WorkerRecord* workers = nullptr;
  float* params = nullptr;
  float* states = nullptr;  // state i at states + i * stride
  float* slots = nullptr;   // worker j's push at slots + j * stride
  int64_t stride = 0;       // floats between consecutive arrays
};

namespace {

// The shard's lock; a worker that died holding it leaves the shard unusable
// (its update may be half written), which every later holder reports.
class ShardLock {
 public:
  ShardLock(ShardHeader* h, int k) : h_(h), k_(k) {
    const int rc = pthread_mutex_lock(&h_->mu);
    if (rc == EOWNERDEAD) {
      h_->broken = 1;
      pthread_mutex_consistent(&h_->mu);
    } else {
      MT_CHECK(rc == 0, "parameter server: locking shard {} failed ({})", k, std::strerror(rc));
    }
    check_intact();
  }
  ~ShardLock() {
    if (!released_) pthread_mutex_unlock(&h_->mu);
  }
  ShardLock(const ShardLock&) = delete;
  ShardLock& operator=(const ShardLock&) = delete;
  // Waits for a signal until `deadline`; false when it passed.
  bool wait(const timespec& deadline) {
    const int rc = pthread_cond_timedwait(&h_->cv, &h_->mu, &deadline);
    if (rc == EOWNERDEAD) {
      h_->broken = 1;
      pthread_mutex_consistent(&h_->mu);
    }
    check_intact();
    return rc != ETIMEDOUT;
  }

 private:
  void check_intact() {
    if (!h_->broken) return;
    pthread_mutex_unlock(&h_->mu);
    released_ = true;
    throw Error(fmt::format("parameter server: a worker process died while updating shard {}; its "
                            "parameters may be half written, so the run stops", k_));
  }
  ShardHeader* h_;
  int k_;
  bool released_ = false;
};

}  // namespace

ParameterStore::ParameterStore(const comm::Communicator& comm, std::vector<ElemSpan> shards,
                               int state_floats, int64_t staleness, bool staleness_lr, double timeout_s)
    : comm_(comm), shards_(std::move(shards)), states_(state_floats), staleness_(staleness),
      staleness_lr_(staleness_lr), timeout_s_(timeout_s) {
  MT_CHECK(comm_.valid(), "a parameter store needs a communicator");
  me_ = comm_.rank();
  workers_ = comm_.size();
  MT_CHECK(static_cast<int>(shards_.size()) == workers_, "{} shards for {} ranks: each rank serves one",
           shards_.size(), workers_);
  MT_CHECK(staleness_ >= 0, "parallel.parameter_server.staleness must be >= 0, got {}", staleness_);
  for (const ElemSpan& s : shards_) shard_floats_ = std::max(shard_floats_, s.count());
  const int64_t header = round_up(static_cast<int64_t>(sizeof(ShardHeader)) +
                                  workers_ * static_cast<int64_t>(sizeof(WorkerRecord)));
  const int64_t stride_bytes = round_up(std::max<int64_t>(1, shard_floats_) * 4);
  const int64_t bytes = header + (1 + states_ + workers_) * stride_bytes;
  memory_ = comm_.alloc_shared(static_cast<size_t>(bytes));  // collective
  for (int r = 0; r < workers_; ++r)
    MT_CHECK(memory_.peer(r), "parallel.parameter_server: rank {} cannot map rank {}'s memory: the "
             "parameter server keeps its shards in one host's shared memory, so every rank must run "
             "on one host over comm.transport = \"shm\" (transport here: {})", me_, r, comm_.transport());
  // This rank's shard: its lock and signal, shared between processes.
  auto* h = new (memory_.data()) ShardHeader{};
  pthread_mutexattr_t ma;
  pthread_mutexattr_init(&ma);
  pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&ma, PTHREAD_MUTEX_ROBUST);
  MT_CHECK(pthread_mutex_init(&h->mu, &ma) == 0, "parameter server: cannot make a shared lock");
  pthread_mutexattr_destroy(&ma);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setpshared(&ca, PTHREAD_PROCESS_SHARED);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  MT_CHECK(pthread_cond_init(&h->cv, &ca) == 0, "parameter server: cannot make a shared signal");
  pthread_condattr_destroy(&ca);
  for (int k = 0; k < workers_; ++k) {
    auto* base = static_cast<char*>(memory_.peer(k));
    Shard v;
    v.h = reinterpret_cast<ShardHeader*>(base);
    v.workers = reinterpret_cast<WorkerRecord*>(base + sizeof(ShardHeader));
    v.stride = stride_bytes / 4;
    v.params = reinterpret_cast<float*>(base + header);
    v.states = v.params + v.stride;
    v.slots = v.states + states_ * v.stride;
    views_.push_back(v);
  }
  mean_.resize(static_cast<size_t>(shard_floats_));
  comm_.barrier().wait();  // every lock initialized before anyone takes one
}

ParameterStore::~ParameterStore() = default;

const ParameterStore::Shard& ParameterStore::at(int k) const { return views_[static_cast<size_t>(k)]; }

float* ParameterStore::params(int k) const { return at(k).params; }
float* ParameterStore::state(int k, int i) const { return at(k).states + i * at(k).stride; }

void ParameterStore::publish(const float* params) {
  const Shard& s = at(me_);
  const ElemSpan span = shard(me_);
  std::memcpy(s.params, params + span.begin, static_cast<size_t>(span.count()) * 4);
  std::memset(s.states, 0, static_cast<size_t>(states_ * s.stride) * 4);
  // Every worker is computing its first gradients from version 0 until it
  // pushes them (or leaves without a step): no update goes ahead of a worker
  // that has not started yet.
  for (int j = 0; j < workers_; ++j) s.workers[j] = WorkerRecord{0, 1, 0, 0, 0.0f};
  comm_.barrier().wait();
}

std::optional<int64_t> ParameterStore::claim_ticket(int64_t limit) {
  const int64_t t = at(0).h->tickets.fetch_add(1);
  if (t >= limit) return std::nullopt;
  return t;
}

void ParameterStore::pull(float* params) {
  for (int k = 0; k < workers_; ++k) {
    const Shard& s = at(k);
    const ElemSpan span = shard(k);
    ShardLock lock(s.h, k);
    std::memcpy(params + span.begin, s.params, static_cast<size_t>(span.count()) * 4);
    s.workers[me_].base = s.h->version;  // at least the version its last push made
  }
}

void ParameterStore::leave(const ApplyFn& apply) {
  for (int k = 0; k < workers_; ++k) {
    const Shard& s = at(k);
    ShardLock lock(s.h, k);
    s.workers[me_].computing = 0;
    try_apply(k, apply);  // pushes that waited for this worker go ahead
  }
}

void ParameterStore::read_all(float* params) {
  for (int k = 0; k < workers_; ++k) {
    const Shard& s = at(k);
    const ElemSpan span = shard(k);
    ShardLock lock(s.h, k);
    std::memcpy(params + span.begin, s.params, static_cast<size_t>(span.count()) * 4);
  }
}

void ParameterStore::push(const float* grads, float scale, float lr, bool valid, const ApplyFn& apply) {
  for (int k = 0; k < workers_; ++k) {
    const Shard& s = at(k);
    const ElemSpan span = shard(k);
    // The slot is this worker's alone until it is marked pending.
    float* slot = s.slots + me_ * s.stride;
    if (valid)
      for (int64_t i = 0; i < span.count(); ++i) slot[i] = grads[span.begin + i] * scale;
    ShardLock lock(s.h, k);
    WorkerRecord& w = s.workers[me_];
    w.pending = 1;
    w.computing = 0;
    w.valid = valid ? 1 : 0;
    w.lr = lr;
    try_apply(k, apply);
  }
  for (int k = 0; k < workers_; ++k) wait_applied(k);
}

void ParameterStore::try_apply(int k, const ApplyFn& apply) {
  const Shard& s = at(k);
  std::vector<WorkerView> views(static_cast<size_t>(workers_));
  int pending = 0, valid = 0;
  float lr = 0;  // the pushes of one update read the same schedule step, or neighbouring ones
  for (int j = 0; j < workers_; ++j) {
    views[static_cast<size_t>(j)] = {s.workers[j].base, s.workers[j].computing != 0};
    pending += s.workers[j].pending;
    if (s.workers[j].pending && s.workers[j].valid) {
      ++valid;
      lr = s.workers[j].lr;
    }
  }
  if (pending == 0 || !may_apply(s.h->version, views, staleness_)) return;
  const ElemSpan span = shard(k);
  if (valid > 0 && span.count() > 0) {
    // The mean of the waiting pushes, added in worker order (deterministic).
    bool first = true;
    for (int j = 0; j < workers_; ++j) {
      if (!s.workers[j].pending || !s.workers[j].valid) continue;
      const float* slot = s.slots + j * s.stride;
      if (first)
        std::memcpy(mean_.data(), slot, static_cast<size_t>(span.count()) * 4);
      else
        for (int64_t i = 0; i < span.count(); ++i) mean_[static_cast<size_t>(i)] += slot[i];
      first = false;
    }
    const float inv = 1.0f / static_cast<float>(valid);
    if (valid > 1)
      for (int64_t i = 0; i < span.count(); ++i) mean_[static_cast<size_t>(i)] *= inv;
    if (staleness_lr_) {
      // Staleness-aware rate (Zhang et al. 2016): an update of gradients that
      // are on average `age` > 1 updates old takes lr / age.
      double age = 0;
      for (int j = 0; j < workers_; ++j)
        if (s.workers[j].pending && s.workers[j].valid)
          age += static_cast<double>(s.h->version - s.workers[j].base);
      age /= valid;
      if (age > 1) lr = static_cast<float>(lr / age);
    }
    apply(k, mean_.data(), lr, s.h->version);
  }
  for (int j = 0; j < workers_; ++j) {
    WorkerRecord& w = s.workers[j];
    if (!w.pending) continue;
    if (w.valid) {
      const int64_t age = s.h->version - w.base;
      ++s.h->gradients;
      s.h->staleness_sum += age;
      s.h->staleness_max = std::max(s.h->staleness_max, age);
    }
    // Its next gradients start now, from this update on.
    w.pending = 0;
    w.computing = 1;
    w.base = s.h->version + 1;
  }
  ++s.h->version;
  ++s.h->updates;
  pthread_cond_broadcast(&s.h->cv);
}

void ParameterStore::wait_applied(int k) {
  const Shard& s = at(k);
  ShardLock lock(s.h, k);
  const timespec deadline = deadline_after(timeout_s_);
  while (s.workers[me_].pending) {
    if (lock.wait(deadline)) continue;
    if (!s.workers[me_].pending) break;
    std::string computing;
    for (int j = 0; j < workers_; ++j)
      if (s.workers[j].computing)
        computing += fmt::format("{}{} (from version {})", computing.empty() ? "" : ", ", j,
                                 s.workers[j].base);
    throw Error(fmt::format("parameter server: rank {}'s gradients waited {:g} s (comm.timeout_s) on "
                            "shard {} at version {} for rank(s) {} to push theirs (staleness bound "
                            "{}); a rank died or is slower than the timeout", me_, timeout_s_, k,
                            s.h->version, computing.empty() ? "none" : computing, staleness_));
  }
}

StalenessStats ParameterStore::staleness_stats() const {
  StalenessStats out;
  double sum = 0;
  for (int k = 0; k < workers_; ++k) {
    const Shard& s = at(k);
    ShardLock lock(s.h, k);
    out.updates = std::max(out.updates, s.h->updates);
    out.gradients += s.h->gradients;
    sum += static_cast<double>(s.h->staleness_sum);
    out.max = std::max(out.max, s.h->staleness_max);
  }
  out.mean = out.gradients > 0 ? sum / static_cast<double>(out.gradients) : 0;
  return out;
}

}  // namespace meshtrain::parallel
