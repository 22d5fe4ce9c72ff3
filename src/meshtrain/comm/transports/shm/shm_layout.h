// Memory layout of a shm communicator's segment. Every rank owns one region;
// each field is written by exactly one rank, on its own cache line, so peers
// poll without false sharing.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace meshtrain::comm::shm {

constexpr size_t kLine = 64;
constexpr size_t kPage = 4096;
// FIFO channel per ordered pair and lane (0: collectives, 1: point-to-point,
// so a pipeline's sends never interleave with a collective's): slots big enough to amortise the handshake,
// few enough that a ring of 8 stays in the LLC.
constexpr size_t kSlotBytes = 64 * 1024;
constexpr size_t kSlots = 8;
constexpr int kLanes = 2;
// Per-rank staging for one-phase small collectives and control allgathers,
// double-buffered by barrier-step parity.
constexpr size_t kSmallBytes = 64 * 1024;
// Scratch buffers of the direct algorithm: three so that a chunk can be
// copied in while peers still gather from the one before (one barrier per chunk).
constexpr int kScratchBuffers = 3;
constexpr size_t kDefaultChunkBytes = 1 << 20;

inline size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

struct alignas(kLine) PaddedCounter {
  std::atomic<uint64_t> value{0};
};

// Where a rank's data for the current direct collective lives: its scratch
// (buffer_id < 0) or one of the communicator's shared buffers.
struct alignas(kLine) DataRef {
  int64_t buffer_id;
  uint64_t offset;
};

// A barrier step that carries data in the cache lines of its flag: every
// line holds the step it was written for beside 56 bytes of data, so a peer's
// wait and its read of the data are the same line transfers, and a peer polls
// all lines of a message at once (their transfers overlap) instead of
// reading the data after a separate flag (the latency of small allreduces).
// Indexed by step parity.
constexpr size_t kTinyLineBytes = 56;
constexpr size_t kTinyLines = 4;  // 224 bytes: allreduces of up to 56 floats
constexpr size_t kTinyBytes = kTinyLineBytes * kTinyLines;
struct alignas(kLine) TinyLine {
  std::atomic<uint64_t> step{0};
  char data[kTinyLineBytes];
};
static_assert(sizeof(TinyLine) == kLine);

struct RankControl {
  PaddedCounter arrived;            // barrier steps this rank has reached
  TinyLine tiny[2][kTinyLines];     // sync_tiny's data and flags, by step parity
  alignas(kLine) int32_t pid;
  uint32_t op_code;       // CollOp of the op in progress, for reports
  uint64_t op_seq;        // sequence number of the op in progress
  uint64_t ops_done;
  DataRef refs[2];        // by barrier-step parity
  alignas(kLine) char abort_reason[512];
};

struct alignas(kLine) GlobalControl {
  std::atomic<int32_t> aborted_by;  // 0: fine; r+1: rank r failed (reason in its RankControl)
};

struct ChannelHeader {
  PaddedCounter head;  // slots written by the sender
  PaddedCounter tail;  // slots consumed by the receiver
};

// Byte offsets inside the segment.
struct Layout {
  int n = 1;
  size_t chunk_bytes = kDefaultChunkBytes;
  size_t control_bytes = 0, small_off = 0, chan_bytes = 0, scratch_off = 0;
  size_t chan_off[kLanes] = {0, 0};
  size_t rank_bytes = 0, global_bytes = 0, total = 0;

  static Layout make(int n, size_t chunk_bytes) {
    Layout l;
    l.n = n;
    l.chunk_bytes = chunk_bytes;
    l.global_bytes = kPage;
    l.control_bytes = round_up(sizeof(RankControl), kPage);
    l.small_off = l.control_bytes;
    l.chan_bytes = kPage + kSlots * kSlotBytes;
    l.chan_off[0] = l.small_off + 2 * kSmallBytes;
    for (int lane = 1; lane < kLanes; ++lane)
      l.chan_off[lane] = l.chan_off[lane - 1] + static_cast<size_t>(n) * l.chan_bytes;
    // Pages of a lane nobody uses are never touched, so cost no memory.
    l.scratch_off = l.chan_off[kLanes - 1] + static_cast<size_t>(n) * l.chan_bytes;
    l.rank_bytes = round_up(l.scratch_off + kScratchBuffers * chunk_bytes, kPage);
    l.total = l.global_bytes + static_cast<size_t>(n) * l.rank_bytes;
    return l;
  }
};

}  // namespace meshtrain::comm::shm
