// isa-levels: scalar avx2 avx512
#include "meshtrain/kernels/cpu/swiglu.h"
#include "meshtrain/core/isa_dispatch.h"
#include "meshtrain/kernels/cpu/vec_math.h"

namespace meshtrain::cpu::MT_ISA_NS {

void swiglu_forward(float* out, const float* gate_up, int64_t N, int64_t H) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const float* g = gate_up + i * 2 * H;
    const float* u = g + H;
    float* o = out + i * H;
#pragma omp simd
    for (int64_t j = 0; j < H; ++j) o[j] = g[j] / (1.0f + fast_expf(-g[j])) * u[j];
  }
}

void swiglu_backward(float* dgate_up, const float* dout, const float* gate_up, int64_t N, int64_t H) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const float* g = gate_up + i * 2 * H;
    const float* u = g + H;
    const float* d = dout + i * H;
    float* dg = dgate_up + i * 2 * H;
    float* du = dg + H;
#pragma omp simd
    for (int64_t j = 0; j < H; ++j) {
      const float s = 1.0f / (1.0f + fast_expf(-g[j]));
      const float silu = g[j] * s;
      du[j] = d[j] * silu;
      dg[j] = d[j] * u[j] * s * (1.0f + g[j] * (1.0f - s));
    }
  }
}

}  // namespace meshtrain::cpu::MT_ISA_NS

namespace meshtrain::cpu {

#if MT_ISA_BASELINE
MT_ISA_DECLARE(void swiglu_forward(float* out, const float* gate_up, int64_t N, int64_t H))
MT_ISA_DECLARE(void swiglu_backward(float* dgate_up, const float* dout, const float* gate_up, int64_t N, int64_t H))
void swiglu_forward(float* out, const float* gate_up, int64_t N, int64_t H) {
  MT_ISA_PICK(swiglu_forward)(out, gate_up, N, H);
}
void swiglu_backward(float* dgate_up, const float* dout, const float* gate_up, int64_t N, int64_t H) {
  MT_ISA_PICK(swiglu_backward)(dgate_up, dout, gate_up, N, H);
}
#endif
}  // namespace meshtrain::cpu
