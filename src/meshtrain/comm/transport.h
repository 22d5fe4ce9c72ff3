// The small interface every algorithm is written against: point-to-point
// exchanges that complete together (so a ring's simultaneous send and
// receive never deadlock), a barrier, and a tiny allgather for control data.
// Transports: transports/shm (processes on one machine, the default) and
// transports/mpi. A stream-ordered transport (NCCL) would implement the same
// calls by enqueueing on its stream instead of completing before returning.
#pragma once
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "meshtrain/comm/types.h"

namespace meshtrain::comm {

struct SharedMapping;

// Who is asking and until when: every wait checks the deadline and names
// the operation, its sequence number, its bytes and the missing peer.
struct OpContext {
  OpContext() = default;
  OpContext(std::function<std::string()> what, double timeout)
      : describe(std::move(what)), timeout_s(timeout) {}
  // "allreduce #5 (4096 bytes, f32, ring)", formatted only when an error needs it.
  std::function<std::string()> describe;
  double timeout_s = 0;
  std::string what() const { return describe ? describe() : std::string("operation"); }
  // timeout_s after the first call: waits ask only once they stall, so an
  // operation that never waits long reads no clock for it (a read is ~25 ns
  // of a ~0.4 us small allreduce). The give-up point moves by the time the
  // operation ran before its first stall, microseconds against a timeout of
  // seconds.
  std::chrono::steady_clock::time_point deadline() const {
    if (deadline_ == std::chrono::steady_clock::time_point{})
      deadline_ = std::chrono::steady_clock::now() +
                  std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                      std::chrono::duration<double>(timeout_s));
    return deadline_;
  }

 private:
  mutable std::chrono::steady_clock::time_point deadline_{};
};

struct SendSpec {
  int peer;
  const void* data;
  size_t bytes;
};
// With `reduce` set, incoming bytes are reduced into `data` instead of copied.
struct RecvSpec {
  int peer;
  void* data;
  size_t bytes;
  bool reduce = false;
  DType dtype = DType::F32;
  ReduceOp op = ReduceOp::Sum;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string_view kind() const = 0;  // "shm", "mpi", "self"

  // Runs all sends and receives to completion. Messages between one pair of
  // ranks are matched in the order they were posted (FIFO per direction).
  virtual void exchange(std::span<const SendSpec> sends, std::span<const RecvSpec> recvs,
                        const OpContext& ctx) = 0;
  virtual void barrier(const OpContext& ctx) = 0;
  // all[r * bytes ...] = rank r's `mine`; for fingerprints, split and setup.
  virtual void allgather_small(const void* mine, size_t bytes, void* all,
                               const OpContext& ctx) = 0;
  // Tell every peer that this rank failed, so they stop waiting for it.
  virtual void abort(const std::string& reason) {}
  // Peers' view of this rank's progress, for the timeout report.
  virtual std::string peer_progress() const { return {}; }

  // What the generic communicator asks of every transport, with defaults for
  // transports that have nothing special to do, so it never needs to know
  // which one it runs on:
  //   note_op/note_done  progress markers peers read for the timeout report
  //   alloc_shared       collective: memory peers can address directly
  //                      (default: private memory; peers then copy through
  //                      the transport as usual)
  //   split              collective: the transport's own sub-group for this
  //                      rank's colour (MPI: MPI_Comm_split), or null when
  //                      the communicator should build one (shared memory)
  // An asynchronous, stream-ordered backend (NCCL) implements exchange() and
  // the collectives by enqueueing on its stream; the communicator's Work then
  // completes when the stream's event does (work.h), not when the call returns.
  virtual void note_op(CollOp op, uint64_t seq) {}
  virtual void note_done() {}
  virtual std::shared_ptr<SharedMapping> alloc_shared(size_t bytes, const OpContext& ctx);
  virtual std::unique_ptr<Transport> split(int color, int key) { return nullptr; }

  // The transport's own collective implementation, offered to the selector
  // beside the generic algorithms (shm: "direct", which reduces in peers'
  // mapped memory; MPI: "mpi", the library's collectives). A transport
  // without one keeps the defaults.
  virtual std::string_view native_algorithm() const { return {}; }
  virtual bool native_supports(CollOp op) const { return false; }
  virtual void run_native(const CollArgs& args, const OpContext& ctx);

  // Point-to-point lane: a view of this transport whose messages travel on
  // channels of their own, so a send or receive never waits behind (or
  // interleaves with) a collective's messages. exchange() on it may run
  // concurrently for different (peer, direction) pairs, one thread each;
  // the communicator keeps one ordered queue per pair. Null: point-to-point
  // shares the collectives' channels and queue.
  virtual Transport* p2p_lane() { return nullptr; }

  // Convenience wrappers over exchange.
  void send(int peer, const void* data, size_t bytes, const OpContext& ctx) {
    SendSpec s{peer, data, bytes};
    exchange({&s, 1}, {}, ctx);
  }
  void recv(int peer, void* data, size_t bytes, const OpContext& ctx) {
    RecvSpec r{peer, data, bytes};
    exchange({}, {&r, 1}, ctx);
  }
};

}  // namespace meshtrain::comm
