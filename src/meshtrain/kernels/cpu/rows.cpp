#include "meshtrain/kernels/cpu/rows.h"

#include <cstring>

#include "meshtrain/kernels/cpu/convert.h"

namespace meshtrain::cpu {

void embedding_lookup(float* out, const int32_t* ids, const float* table,
                      const uint16_t* table_half, HalfFormat fmt, int64_t v_begin, int64_t v_rows,
                      int64_t N, int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const int64_t row = static_cast<int64_t>(ids[i]) - v_begin;
    float* dst = out + i * C;
    if (row < 0 || row >= v_rows)
      std::memset(dst, 0, sizeof(float) * C);
    else if (table_half)
      from_half(fmt, table_half + row * C, dst, C);
    else
      std::memcpy(dst, table + row * C, sizeof(float) * C);
  }
}

// Serial in i: a row that several tokens share sums their gradients in token
// order, whatever the thread count.
void embedding_accumulate(float* dtable, const float* dout, const int32_t* ids, int64_t v_begin,
                          int64_t v_rows, int64_t N, int64_t C) {
  for (int64_t i = 0; i < N; ++i) {
    const int64_t r = static_cast<int64_t>(ids[i]) - v_begin;
    if (r < 0 || r >= v_rows) continue;  // another shard's row
    float* row = dtable + r * C;
    const float* d = dout + i * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) row[c] += d[c];
  }
}

void add_periodic_rows(float* out, const float* rows, int64_t N, int64_t C, int64_t period,
                       int64_t first) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    float* o = out + i * C;
    const float* r = rows + ((first + i) % period) * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) o[c] += r[c];
  }
}

void sum_periodic_rows(float* drows, const float* d, int64_t N, int64_t C, int64_t period) {
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < period; ++t) {
    float* dst = drows + t * C;
    for (int64_t i = t; i < N; i += period) {
      const float* src = d + i * C;
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) dst[c] += src[c];
    }
  }
}

}  // namespace meshtrain::cpu
