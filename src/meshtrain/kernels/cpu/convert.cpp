#include "meshtrain/kernels/cpu/convert.h"

#include <algorithm>

#include "meshtrain/core/half.h"

namespace meshtrain::cpu {

namespace {
// Below this a conversion is not worth waking threads for.
constexpr int64_t kParallelMin = 1 << 16;
// Chunks a multiple of 16 elements (one AVX-512 vector) and 64 bytes of output.
constexpr int64_t kChunk = 1 << 14;

template <typename F>
void chunked(int64_t n, F&& f) {
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t b = c * kChunk, e = std::min(n, b + kChunk);
    f(b, e - b);
  }
}
}  // namespace

void to_half(Half fmt, const float* in, uint16_t* out, int64_t n) {
  chunked(n, [&](int64_t b, int64_t m) {
    if (fmt == Half::BF16)
      f32_to_bf16(in + b, out + b, static_cast<size_t>(m));
    else
      f32_to_f16(in + b, out + b, static_cast<size_t>(m));
  });
}

void from_half(Half fmt, const uint16_t* in, float* out, int64_t n) {
  chunked(n, [&](int64_t b, int64_t m) {
    if (fmt == Half::BF16)
      bf16_to_f32(in + b, out + b, static_cast<size_t>(m));
    else
      f16_to_f32(in + b, out + b, static_cast<size_t>(m));
  });
}

}  // namespace meshtrain::cpu
