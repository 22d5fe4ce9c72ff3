// Copies with non-temporal (streaming) stores: the destination lines are
// written straight to memory without first being read into the cache (no
// read-for-ownership) and without evicting data the collective still needs.
// Worth it only for results far larger than the cache that nothing reads
// soon (a large allreduce's output); below kStreamingBytes plain memcpy wins.
#pragma once
#include <cstddef>

namespace meshtrain::comm {

// Collectives whose message is at least this many bytes write their final
// result with stream_copy. The default follows the CPU generation: twice the
// L3 on AMD Zen 5 (streaming measured 25-40% slower at 4-32 MiB there),
// 8 MiB on AMD Zen 4 (16% slower at 4 MiB, faster at 8 MiB), 4 MiB
// elsewhere (a 2-rank 4 MiB allreduce touches 16 MiB of inputs and outputs). Direct allgather uses the same threshold; docs/PERFORMANCE.md has
// the A/B runs.
// MESHTRAIN_SHM_STREAMING_BYTES overrides it (0 = never stream).
size_t streaming_threshold_bytes();

// Streams with the widest stores the dispatch level allows (core/cpu_isa.h).
void stream_copy(void* dst, const void* src, size_t bytes);
// The stores stream_copy uses now: "avx512", "avx2", "sse2" (or "memcpy").
const char* stream_copy_isa();
// stream_copy when `streaming`, else memcpy: the final writes of a collective
// whose size decided between them (streaming_threshold_bytes()).
void copy_out(void* dst, const void* src, size_t bytes, bool streaming);
// Orders the streaming stores issued so far before later stores (call before
// publishing that the data is written).
void stream_fence();

}  // namespace meshtrain::comm
