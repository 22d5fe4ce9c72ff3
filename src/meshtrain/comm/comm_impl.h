// Inside a Communicator (private to comm/): its transport, placement and
// algorithm selector, the progress engines that run its operations (one for
// collectives, one per (peer, direction) for point-to-point), the debug
// check, the flight recorder and the first-failure state.
#pragma once
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "meshtrain/comm/algorithm_selector.h"
#include "meshtrain/comm/communicator.h"
#include "meshtrain/comm/flight_recorder.h"
#include "meshtrain/comm/placement.h"
#include "meshtrain/comm/progress_engine.h"
#include "meshtrain/comm/transport.h"

namespace meshtrain::comm {

// One operation as an engine runs it.
// A collective runs its algorithm (`alg`) on `args`; other operations (sends,
// receives, split, alloc_shared) run `body`. Collectives carry no
// std::function, so issuing one allocates nothing but its WorkState, and one
// that runs inline and succeeds not even that.
struct Task {
  uint64_t seq = 0;
  CollOp op = CollOp::Barrier;
  const char* kind = "";  // fingerprint name: "allreduce", "split", "alloc_shared"
  CollArgs args;
  std::string_view algo;  // static name
  const Algorithm* alg = nullptr;
  bool collective = true;
  std::function<void(const OpContext&)> body;
  OpInfo info;  // what the flight record and error messages say of it
  // Created when the task is queued (a caller may wait on it) or fails; a
  // collective that runs inline and succeeds needs none (no allocation).
  std::shared_ptr<WorkState> work;
};

struct CommImpl {
  std::unique_ptr<Transport> transport;
  Transport* p2p = nullptr;  // transport->p2p_lane(), or null: p2p rides the collectives' lane
  CommOptions opts;
  AlgorithmSelector selector;
  CommImpl(const CommOptions& o, const AlgorithmSelector& s) : opts(o), selector(s) {}
  ~CommImpl();  // leaves the on-demand dump (flight_dump.h) before anything goes
  int dump_id = -1;
  Placement placement;
  std::string job_id;
  std::string name;
  int split_count = 0;
  std::atomic<uint64_t> issued{0}, p2p_issued{0};
  // Per op kind: calls and bytes issued (Communicator::counters).
  std::array<std::atomic<uint64_t>, kCollOpCount> calls{}, bytes_issued{};
  FlightRecorder recorder;

  // First failure: later operations fail at once, on every lane.
  std::mutex fail_mu;
  std::atomic<bool> is_broken{false};
  std::string broken;
  bool reported = false;

  std::unique_ptr<Communicator> node_local, node_leaders;
  bool groups_ready = false;

  // Engines last: they run tasks that use everything above, so they stop first.
  std::mutex lanes_mu;
  std::map<std::pair<int, CollOp>, std::unique_ptr<ProgressEngine<Task>>> peer_lanes;
  ProgressEngine<Task> engine{[this](Task& t) { run(t); }};

  int rank() const { return transport->rank(); }
  int size() const { return transport->size(); }
  OpContext context(std::function<std::string()> what) const { return {std::move(what), opts.timeout_s}; }

  // Runs one task on the calling engine's thread (or inline).
  void run(Task& t);
  // A collective's algorithm, with Avg run as Sum and scaled after.
  void run_algorithm(const Task& t, const OpContext& ctx);
  // Queues a collective (inline when small and the engine is idle).
  Work enqueue(Task task, size_t inline_bytes);
  static std::shared_ptr<WorkState> new_work_state(const OpInfo& info);
  // Queues a send or receive on its (peer, direction) lane.
  Work enqueue_p2p(Task task);
  // An op's sequence number, taken when it is issued; given back when issuing
  // it fails (out of memory), so a rank's numbers never drift from its peers'.
  void number(Task& t);
  void give_back_number(CollOp op);
  // An op not yet numbered; enqueue or enqueue_p2p numbers it.
  Task make_task(CollOp op, const char* kind, const CollArgs& args, std::string_view algo,
                 std::string detail = {});
  void synchronize();

  // The node-local and node-leaders communicators (the two-level algorithm).
  std::pair<Communicator*, Communicator*> groups(const OpContext& ctx);
  // The split itself; runs inside a task on every rank.
  // timeout_s <= 0: the group keeps this one's timeout.
  Communicator split_now(int color, int key, const OpContext& ctx, double timeout_s = 0);

 private:
  void debug_check(const Task& t, const OpContext& ctx);
  void record_failure(const Task& t, const std::exception& e);
};

// A new communicator's state around an already joined transport: learns the
// placement (collective) and points the selector at the group.
std::shared_ptr<CommImpl> make_comm_impl(const CommOptions& opts, const AlgorithmSelector& selector,
                                         std::unique_ptr<Transport> transport, std::string job_id,
                                         std::string name, Placement placement);

}  // namespace meshtrain::comm
