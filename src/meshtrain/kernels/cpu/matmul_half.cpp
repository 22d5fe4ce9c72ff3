#include "meshtrain/kernels/cpu/matmul_half.h"

#include "meshtrain/kernels/cpu/convert.h"
#include "meshtrain/kernels/cpu/matmul.h"

namespace meshtrain::cpu {

void matmul_forward_half(Half fmt, float* out, const uint16_t* inp, const uint16_t* weight,
                         const float* bias, int64_t N, int64_t C, int64_t OC, bool accumulate) {
  const float beta = seed_output_with_bias(out, bias, N, OC, accumulate);
  gemm_half(fmt, false, true, N, OC, C, 1.0f, inp, C, weight, C, beta, out, OC);
}

void matmul_backward_half(Half fmt, float* dinp, float* dweight, float* dbias, const float* dout,
                          uint16_t* dout_half, const uint16_t* inp, const uint16_t* weight,
                          int64_t N, int64_t C, int64_t OC, bool accumulate_dinp) {
  if (dinp || dweight) to_half(fmt, dout, dout_half, N * OC);
  if (dinp)
    gemm_half(fmt, false, false, N, C, OC, 1.0f, dout_half, OC, weight, C,
              accumulate_dinp ? 1.f : 0.f, dinp, C);
  if (dweight) matmul_backward_weight_half(fmt, dweight, dout_half, inp, N, C, OC);
  if (dbias) add_column_sums(dbias, dout, N, OC);
}

void matmul_backward_weight_half(Half fmt, float* dweight, const uint16_t* dout_half,
                                 const uint16_t* inp, int64_t N, int64_t C, int64_t OC) {
  gemm_half(fmt, true, false, OC, C, N, 1.0f, dout_half, OC, inp, C, 1.0f, dweight, C);
}

}  // namespace meshtrain::cpu
