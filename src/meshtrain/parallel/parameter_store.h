// The parameter server's shards (parallel/parameter_server.h): rank k serves
// shard k of the flat parameters from a segment of its memory that every
// worker of the host maps (Communicator::alloc_shared over shm): the f32
// parameters, the optimizer's state and one push slot per worker, behind a
// process-shared lock. Workers pull parameters and push gradients without a
// global barrier; whoever completes a set of pushes applies it.
//
// Bounded staleness. A shard's version counts its updates. A worker is
// "computing" from the update that applied its last push (or the start) to
// its next push; its base is the version it pulled (at least that update's
// result). A worker that has no steps left leaves. The pushes waiting
// on a shard are applied together, as one update with their mean, as soon as
// that update would leave no computing worker more than `staleness` versions
// behind (may_apply below); until then their workers wait. So every gradient
// is applied at most `staleness` versions after the parameters it was
// computed on, and:
//   staleness 0   an update waits for every worker's push: synchronous data
//                 parallelism (one averaged update per round, in worker order)
//   staleness s   a fast worker runs up to s updates ahead of a slow one's
//                 gradient, which then lands with the others pending
// The shards keep their own versions (a worker's step pulls them all).
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "meshtrain/comm/communicator.h"
#include "meshtrain/core/elem_span.h"

namespace meshtrain::parallel {

// A worker as a shard's update rule sees it.
struct WorkerView {
  int64_t base = 0;        // the shard version its parameters came from
  bool computing = false;  // pulled, not pushed yet
};
// Whether the waiting pushes may become version `version + 1` now: every
// computing worker's base stays within `staleness` of it.
bool may_apply(int64_t version, std::span<const WorkerView> workers, int64_t staleness);

// Shard boundaries: `workers` pieces of [0, numel) cut at tensor boundaries
// (`boundaries`, sorted, each a tensor's first element) nearest the equal
// split, so a layer's norms stay within one shard; a piece may be empty.
std::vector<ElemSpan> shard_spans(int64_t numel, const std::vector<int64_t>& boundaries, int workers);

// The staleness the applied gradients had (versions between the pull and
// the update that applied them).
struct StalenessStats {
  int64_t updates = 0, gradients = 0, max = 0;
  double mean = 0;
};

class ParameterStore {
 public:
  // Called by a worker that completes an update of `shard`: mean_grads[i] is
  // the mean gradient of element begin + i; lr the last valid push's; the
  // update is the shard's `version`-th (from 0). Runs under the shard's lock.
  using ApplyFn = std::function<void(int shard, const float* mean_grads, float lr, int64_t version)>;

  // Collective over `comm` (one host's shm transport); shard k lives on rank
  // k. `state_floats` optimizer-state elements per parameter. staleness_lr:
  // an update whose gradients are on average a > 1 updates old applies
  // lr / a (Zhang et al. 2016, staleness-aware asynchronous SGD).
  ParameterStore(const comm::Communicator& comm, std::vector<ElemSpan> shards, int state_floats,
                 int64_t staleness, bool staleness_lr, double timeout_s);
  ~ParameterStore();
  ParameterStore(const ParameterStore&) = delete;
  ParameterStore& operator=(const ParameterStore&) = delete;

  int shards() const { return static_cast<int>(shards_.size()); }
  ElemSpan shard(int k) const { return shards_[static_cast<size_t>(k)]; }
  // Shard k's parameters and optimizer state i in shared memory (element 0 =
  // the shard's first).
  float* params(int k) const;
  float* state(int k, int i) const;
  // Collective: each rank writes its own shard from `params` (the whole
  // flat buffer, the same on every rank) and zeroes the state.
  void publish(const float* params);
  // The next of the run's tickets (`limit` in all, shared by every worker),
  // or nullopt when they are gone.
  std::optional<int64_t> claim_ticket(int64_t limit);
  // Starts a step: every shard into `params` (the whole flat buffer).
  void pull(float* params);
  // This worker takes no more steps: updates stop waiting for it.
  void leave(const ApplyFn& apply);
  // Ends a step: this worker's gradients (the whole flat buffer, times
  // `scale`); valid = false pushes none (a skipped step) but still lets the
  // round complete. Returns when every shard has applied them.
  void push(const float* grads, float scale, float lr, bool valid, const ApplyFn& apply);
  // Every shard's current parameters into `params`, without starting a step.
  void read_all(float* params);
  StalenessStats staleness_stats() const;  // summed over the shards

 private:
  struct Shard;
  const Shard& at(int k) const;
  void try_apply(int k, const ApplyFn& apply);
  void wait_applied(int k);

  comm::Communicator comm_;
  std::vector<ElemSpan> shards_;
  int states_;
  int64_t staleness_;
  bool staleness_lr_;
  double timeout_s_;
  int me_ = 0, workers_ = 1;
  int64_t shard_floats_ = 0;  // the largest shard's elements
  comm::SharedBuffer memory_;
  std::vector<Shard> views_;  // shard k's arrays as this process maps them
  std::vector<float> mean_;  // scratch for an update's mean gradient
};

}  // namespace meshtrain::parallel
