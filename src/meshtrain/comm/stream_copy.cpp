#include "meshtrain/comm/stream_copy.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include <unistd.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace meshtrain::comm {

namespace {

// Where streaming starts to pay depends on the cache design, so the default is
// measured per vendor (docs/PERFORMANCE.md, allreduce A/B of the threshold):
// on Intel Xeon VMs streaming won from 4 MiB (+11% at 4 MiB, +22-33% at
// 8 MiB); on AMD Zen (L3 a victim cache, 32 MiB per CCD) it lost 25-40% at
// 4-32 MiB and broke even only at 64 MiB, i.e. from about twice the L3.
size_t default_streaming_threshold() {
  constexpr size_t kMiB = size_t{1} << 20;
#if defined(__x86_64__) && defined(__GNUC__)
  if (__builtin_cpu_is("intel")) return 4 * kMiB;
#endif
  const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  const size_t llc = l3 > 0 ? static_cast<size_t>(l3) : 32 * kMiB;
  return std::max(4 * kMiB, 2 * llc);
}

}  // namespace

size_t streaming_threshold_bytes() {
  static const size_t bytes = [] {
    const char* s = std::getenv("MESHTRAIN_SHM_STREAMING_BYTES");
    if (!s || !*s) return default_streaming_threshold();
    const long long v = std::atoll(s);
    return v <= 0 ? SIZE_MAX : static_cast<size_t>(v);
  }();
  return bytes;
}

void stream_copy(void* dst, const void* src, size_t bytes) {
#if defined(__x86_64__)
  char* d = static_cast<char*>(dst);
  const char* s = static_cast<const char*>(src);
  // Plain copy up to the first 64-byte boundary of the destination.
  const size_t head = std::min(bytes, (64 - reinterpret_cast<uintptr_t>(d) % 64) % 64);
  std::memcpy(d, s, head);
  d += head, s += head, bytes -= head;
  const size_t body = bytes / 64 * 64;
  for (size_t i = 0; i < body; i += 64) {
#if defined(__AVX512F__)
    _mm512_stream_si512(reinterpret_cast<__m512i*>(d + i),
                        _mm512_loadu_si512(reinterpret_cast<const void*>(s + i)));
#elif defined(__AVX__)
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i),
                        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i)));
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i + 32),
                        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 32)));
#else
    for (int k = 0; k < 64; k += 16)
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + k),
                       _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + k)));
#endif
  }
  std::memcpy(d + body, s + body, bytes - body);
#else
  std::memcpy(dst, src, bytes);
#endif
}

void copy_out(void* dst, const void* src, size_t bytes, bool streaming) {
  if (streaming)
    stream_copy(dst, src, bytes);
  else
    std::memcpy(dst, src, bytes);
}

void stream_fence() {
#if defined(__x86_64__)
  _mm_sfence();
#endif
}

}  // namespace meshtrain::comm
