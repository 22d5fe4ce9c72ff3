// Transport for processes on one machine over one POSIX shared-memory
// segment per communicator: barrier steps, FIFO channels per ordered pair,
// small staging slots and scratch that peers read directly (the direct
// algorithm), plus shared buffers allocated collectively (zero-copy).
#pragma once
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "meshtrain/comm/shared_buffer.h"
#include "meshtrain/comm/transport.h"
#include "meshtrain/comm/transports/shm/exchange_tuner.h"
#include "meshtrain/comm/transports/shm/shm_layout.h"
#include "meshtrain/comm/transports/shm/shm_segment.h"

namespace meshtrain::comm {

class ShmTransport final : public Transport {
 public:
  // Collective over the `size` ranks that share `job_id` and `comm_name`.
  ShmTransport(int rank, int size, const std::string& job_id, const std::string& comm_name,
               double timeout_s);
  ~ShmTransport() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string_view kind() const override { return "shm"; }
  void exchange(std::span<const SendSpec> sends, std::span<const RecvSpec> recvs,
                const OpContext& ctx) override {
    exchange_on(lanes_[0], sends, recvs, ctx);
  }
  void barrier(const OpContext& ctx) override { sync(ctx); }
  // Native collectives: the direct algorithm (shm_direct.cpp).
  std::string_view native_algorithm() const override { return "direct"; }
  bool native_supports(CollOp op) const override;
  void run_native(const CollArgs& args, const OpContext& ctx) override;
  Transport* p2p_lane() override { return p2p_.get(); }
  void allgather_small(const void* mine, size_t bytes, void* all, const OpContext& ctx) override;
  void abort(const std::string& reason) override;
  std::string peer_progress() const override;

  // ---- used by the direct algorithm ----
  // Arrive at the next barrier step and wait for every peer to reach it.
  void sync(const OpContext& ctx);
  // A barrier step that also publishes `bytes` (<= shm::kTinyBytes) of data;
  // afterwards rank p's data for this step is readable (until the next
  // barrier step of this rank): in place through tiny_data(p) when it fits
  // one line (<= shm::kTinyLineBytes), else copied out by copy_tiny_data.
  void sync_tiny(const void* mine, size_t bytes, const OpContext& ctx);
  const char* tiny_data(int rank) const;
  void copy_tiny_data(int rank, void* dst, size_t bytes) const;
  uint64_t step() const { return step_; }
  size_t chunk_bytes() const { return layout_.chunk_bytes; }
  char* small_slot(int rank, uint64_t step_parity) const;
  char* scratch(int rank, int index) const;
  shm::RankControl& control(int rank) const;
  // Resolves a pointer to (shared buffer id, offset) if it lies in one of
  // this communicator's shared buffers.
  std::optional<shm::DataRef> find_shared(const void* p, size_t bytes) const;
  char* resolve(int rank, const shm::DataRef& ref, int scratch_index) const;
  // Records which op is running (read by peers' timeout reports).
  void note_op(CollOp op, uint64_t seq) override;
  void note_done() override;

  // Collective: every rank maps every peer's `bytes` of shared memory.
  std::shared_ptr<SharedMapping> alloc_shared(size_t bytes, const OpContext& ctx) override;

  // The buffer index the next direct chunk may write, syncing first if a
  // peer could still be reading it (see direct.cpp).
  int next_scratch(const OpContext& ctx);
  void scratch_published(int index) { scratch_step_[index] = step_ + 1; }
  // How this rank writes what peers read, per collective (exchange_tuner.h).
  ExchangeTuner& exchange(ExchangeUse use) { return exchange_[static_cast<size_t>(use)]; }

 private:
  // One lane's channels and this rank's FIFO cursors per peer. A cursor is
  // touched only by the thread exchanging with that peer in that direction.
  struct Lane {
    int index = 0;
    std::vector<uint64_t> sent, received;
  };
  class P2pLane;
  void exchange_on(Lane& lane, std::span<const SendSpec> sends, std::span<const RecvSpec> recvs,
                   const OpContext& ctx);
  char* region(int rank) const;
  shm::ChannelHeader& channel(int lane, int receiver, int sender) const;
  char* channel_slots(int lane, int receiver, int sender) const;
  // Why idle() stopped waiting. A peer that exited (or a deadline that passed)
  // is only a failure if what we wait for is still missing: a peer may publish
  // its part and exit between our last look and the liveness check, so the
  // caller looks once more before calling fail_waiting.
  enum class Stall { None, PeerExited, TimedOut };
  // Backoff while nothing progresses; throws on abort.
  Stall idle(int& spins, std::chrono::steady_clock::time_point& last_check, int blocking_peer,
             const OpContext& ctx);
  [[noreturn]] void fail_waiting(int peer, const OpContext& ctx, bool dead);
  void check_abort(const OpContext& ctx) const;

  int rank_, size_;
  std::string job_id_, comm_name_;
  shm::Layout layout_;
  ShmSegment segment_;
  char* private_memory_ = nullptr;  // size 1: no segment needed
  char* base_ = nullptr;
  uint64_t step_ = 0;
  int spin_limit_ = 64;
  Lane lanes_[shm::kLanes];
  std::unique_ptr<Transport> p2p_;
  uint64_t scratch_step_[shm::kScratchBuffers] = {0, 0, 0};
  int scratch_next_ = 0;
  int64_t next_buffer_id_ = 0;
  struct Registry;
  std::shared_ptr<Registry> registry_;
  ExchangeTuner exchange_[static_cast<size_t>(ExchangeUse::Count)];
};

// A buffer every rank of the group has mapped (SharedMapping::local is this
// rank's segment).
struct ShmMapping final : SharedMapping {
  int64_t id = 0;
  std::vector<ShmSegment> segments;  // segments[r] = rank r's buffer
  std::vector<char*> bases;
  char* private_memory = nullptr;  // size 1
  std::function<void(int64_t)> on_free;
  ~ShmMapping() override;
};

}  // namespace meshtrain::comm
