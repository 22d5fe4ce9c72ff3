#include "meshtrain/comm/stream_copy.h"

#include "meshtrain/core/cpu_isa.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace meshtrain::comm {

namespace {

// Where streaming starts to pay depends on the CPU generation, so the default
// is what the allreduce A/B of the threshold measured on each (2 ranks,
// docs/PERFORMANCE.md): on the first AMD Zen 4 VMs streaming won from 4 MiB
// (+11% at 4 MiB, +22-33% at 8 MiB, -30% at 2 MiB), on a later one (32 MiB
// L3) it lost 16% at 4 MiB (medians of 8 alternations) and still won at 8 MiB,
// so Zen 4 (family 25) streams from 8 MiB; on AMD Zen 5 (family 26) it lost
// 25-40% at 4-32 MiB and broke even at 64 MiB, about twice the L3. CPUs not
// measured keep the older 4 MiB.
#if defined(__x86_64__) && defined(__GNUC__)
int x86_family() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return 0;
  const int base = (eax >> 8) & 0xf;
  return base == 0xf ? base + static_cast<int>((eax >> 20) & 0xff) : base;
}

// The L3 one core sees, from sysfs (sysconf's figure is the whole socket's
// on these VMs: 384 MiB where the core's L3 is 32 MiB); 0 when unknown.
size_t l3_bytes() {
  std::FILE* f = std::fopen("/sys/devices/system/cpu/cpu0/cache/index3/size", "r");
  if (!f) return 0;
  unsigned long long v = 0;
  char unit = 0;
  const int got = std::fscanf(f, "%llu%c", &v, &unit);
  std::fclose(f);
  if (got < 1) return 0;
  if (unit == 'K') v <<= 10;
  if (unit == 'M') v <<= 20;
  return static_cast<size_t>(v);
}
#endif

size_t default_streaming_threshold() {
  constexpr size_t kMiB = size_t{1} << 20;
#if defined(__x86_64__) && defined(__GNUC__)
  if (__builtin_cpu_is("amd") && x86_family() >= 26) {
    const size_t l3 = l3_bytes();
    return std::max(4 * kMiB, 2 * (l3 ? l3 : 32 * kMiB));
  }
  if (__builtin_cpu_is("amd") && x86_family() == 25) return 8 * kMiB;
#endif
  return 4 * kMiB;
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

#if defined(__x86_64__)
namespace {

// 64-byte bodies with streaming stores, one variant per dispatch level
// (target attributes: the portable build's baseline has only SSE2 stores).
__attribute__((target("avx512f"))) void stream_body_avx512(char* d, const char* s, size_t body) {
  for (size_t i = 0; i < body; i += 64)
    _mm512_stream_si512(reinterpret_cast<__m512i*>(d + i),
                        _mm512_loadu_si512(reinterpret_cast<const void*>(s + i)));
}

__attribute__((target("avx2"))) void stream_body_avx2(char* d, const char* s, size_t body) {
  for (size_t i = 0; i < body; i += 64) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i),
                        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i)));
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i + 32),
                        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 32)));
  }
}

void stream_body_sse2(char* d, const char* s, size_t body) {
  for (size_t i = 0; i < body; i += 64)
    for (int k = 0; k < 64; k += 16)
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + k),
                       _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + k)));
}

}  // namespace
#endif

const char* stream_copy_isa() {
#if defined(__x86_64__)
  const Isa level = active_isa();
  return level >= Isa::Avx512 ? "avx512" : level >= Isa::Avx2 ? "avx2" : "sse2";
#else
  return "memcpy";
#endif
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
  const Isa level = active_isa();
  if (level >= Isa::Avx512)
    stream_body_avx512(d, s, body);
  else if (level >= Isa::Avx2)
    stream_body_avx2(d, s, body);
  else
    stream_body_sse2(d, s, body);
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
