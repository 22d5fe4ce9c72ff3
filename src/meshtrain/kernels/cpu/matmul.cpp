// isa-levels: scalar avx2 avx512
#include "meshtrain/kernels/cpu/matmul.h"
#include "meshtrain/core/isa_dispatch.h"

#include <algorithm>
#include <cstring>

namespace meshtrain::cpu::MT_ISA_NS {

float seed_output_with_bias(float* out, const float* bias, int64_t N, int64_t OC,
                            bool accumulate) {
  if (!bias) return accumulate ? 1.0f : 0.0f;
  // Seed the output with the bias (added to it when accumulating) so the
  // GEMM's beta=1 pass fuses the bias add.
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    float* row = out + i * OC;
    if (accumulate) {
      for (int64_t o = 0; o < OC; ++o) row[o] += bias[o];
    } else {
      std::memcpy(row, bias, sizeof(float) * OC);
    }
  }
  return 1.0f;
}

void add_column_sums(float* out, const float* m, int64_t N, int64_t OC) {
  // Each thread owns a block of columns and walks all rows in order, so the
  // sum order does not depend on the thread count.
  const int64_t block = 64;
  const int64_t nblocks = (OC + block - 1) / block;
#pragma omp parallel for schedule(static)
  for (int64_t bi = 0; bi < nblocks; ++bi) {
    const int64_t o0 = bi * block, o1 = std::min(OC, o0 + block);
    float acc[block];
    for (int64_t o = o0; o < o1; ++o) acc[o - o0] = 0.f;
    for (int64_t i = 0; i < N; ++i) {
      const float* row = m + i * OC;
      for (int64_t o = o0; o < o1; ++o) acc[o - o0] += row[o];
    }
    for (int64_t o = o0; o < o1; ++o) out[o] += acc[o - o0];
  }
}

}  // namespace meshtrain::cpu::MT_ISA_NS

#if MT_ISA_BASELINE
namespace meshtrain::cpu {

// The bias seeding and column sums are the GEMM glue that runs per ISA level.
MT_ISA_DECLARE(float seed_output_with_bias(float* out, const float* bias, int64_t N, int64_t OC, bool accumulate))
MT_ISA_DECLARE(void add_column_sums(float* out, const float* m, int64_t N, int64_t OC))

float seed_output_with_bias(float* out, const float* bias, int64_t N, int64_t OC,
                            bool accumulate) {
  return MT_ISA_PICK(seed_output_with_bias)(out, bias, N, OC, accumulate);
}

void add_column_sums(float* out, const float* m, int64_t N, int64_t OC) {
  MT_ISA_PICK(add_column_sums)(out, m, N, OC);
}

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias,
                    int64_t N, int64_t C, int64_t OC, bool accumulate) {
  if (bias) {
    sgemm_bias(false, true, N, OC, C, inp, C, weight, C, bias, accumulate, out);
    return;
  }
  sgemm(false, true, N, OC, C, 1.0f, inp, C, weight, C, accumulate ? 1.0f : 0.0f, out, OC);
}

void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                     const float* inp, const float* weight, int64_t N, int64_t C, int64_t OC,
                     bool accumulate_dinp) {
  if (dinp) sgemm(false, false, N, C, OC, 1.0f, dout, OC, weight, C, accumulate_dinp ? 1.f : 0.f, dinp, C);
  if (dweight) sgemm(true, false, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f, dweight, C);
  if (dbias) add_column_sums(dbias, dout, N, OC);
}

}  // namespace meshtrain::cpu
#endif
