// Embeddings, positions and periodic rows on the GPU (kernel_table.h's
// encoder_*, embedding_*, *_periodic_rows; semantics of kernels/cpu/encoder.h
// and rows.h). Gradient scatters are deterministic: no float atomics.
#pragma once
#include <cstdint>

#include "meshtrain/core/half.h"
#include "meshtrain/core/stream.h"

namespace meshtrain::cuda {

void encoder_forward(Stream s, float* out, const int32_t* inp, const float* wte, const float* wpe,
                     int64_t B, int64_t T, int64_t C);
void encoder_backward(Stream s, float* dwte, float* dwpe, const float* dout, const int32_t* inp,
                      int64_t B, int64_t T, int64_t C);
void embedding_lookup(Stream s, float* out, const int32_t* ids, const float* table,
                      const uint16_t* table_half, HalfFormat fmt, int64_t v_begin, int64_t v_rows,
                      int64_t N, int64_t C);
void embedding_accumulate(Stream s, float* dtable, const float* dout, const int32_t* ids,
                          int64_t v_begin, int64_t v_rows, int64_t N, int64_t C);
void add_periodic_rows(Stream s, float* out, const float* rows, int64_t N, int64_t C,
                       int64_t period, int64_t first);
void sum_periodic_rows(Stream s, float* drows, const float* d, int64_t N, int64_t C,
                       int64_t period);

}  // namespace meshtrain::cuda
