// Copies with non-temporal (streaming) stores: the destination lines are
// written straight to memory without first being read into the cache (no
// read-for-ownership) and without evicting data the collective still needs.
// Worth it only for results far larger than the cache that nothing reads
// soon (a large allreduce's output); below kStreamingBytes plain memcpy wins.
#pragma once
#include <cstddef>

namespace meshtrain::comm {

// Collectives whose message is at least this many bytes write their final
// result with stream_copy: 4 MiB by default. With 2 ranks a 4 MiB allreduce
// already touches 16 MiB of inputs and outputs, half the last-level cache of
// the machines we target (shared with neighbours), and streaming measured
// +11% at 4 MiB, +22-33% at 8 MiB, but -30% at 2 MiB (allreduce, measured;
// direct allgather uses the same threshold; docs/PERFORMANCE.md);
// MESHTRAIN_SHM_STREAMING_BYTES overrides it (0 = never stream).
size_t streaming_threshold_bytes();

void stream_copy(void* dst, const void* src, size_t bytes);
// stream_copy when `streaming`, else memcpy: the final writes of a collective
// whose size decided between them (streaming_threshold_bytes()).
void copy_out(void* dst, const void* src, size_t bytes, bool streaming);
// Orders the streaming stores issued so far before later stores (call before
// publishing that the data is written).
void stream_fence();

}  // namespace meshtrain::comm
