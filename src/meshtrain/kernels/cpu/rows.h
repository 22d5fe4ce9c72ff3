// Row-wise ops of the models' embeddings, biases and positions, as the kernel
// table defines them (kernels/kernel_table.h): lookups and accumulations over
// one vocabulary shard, and rows added or summed with a period.
#pragma once
#include <cstdint>

#include "meshtrain/core/half.h"

namespace meshtrain::cpu {

void embedding_lookup(float* out, const int32_t* ids, const float* table,
                      const uint16_t* table_half, HalfFormat fmt, int64_t v_begin, int64_t v_rows,
                      int64_t N, int64_t C);
void embedding_accumulate(float* dtable, const float* dout, const int32_t* ids, int64_t v_begin,
                          int64_t v_rows, int64_t N, int64_t C);
void add_periodic_rows(float* out, const float* rows, int64_t N, int64_t C, int64_t period,
                       int64_t first);
void sum_periodic_rows(float* drows, const float* d, int64_t N, int64_t C, int64_t period);

}  // namespace meshtrain::cpu
