// isa-levels: scalar avx2 avx512
#include "meshtrain/kernels/cpu/encoder.h"
#include "meshtrain/core/isa_dispatch.h"

#include <algorithm>

namespace meshtrain::cpu::MT_ISA_NS {

void encoder_forward(float* out, const int32_t* inp, const float* wte, const float* wpe,
                     int64_t B, int64_t T, int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < B * T; ++i) {
    const float* e = wte + static_cast<int64_t>(inp[i]) * C;
    const float* p = wpe + (i % T) * C;
    float* o = out + i * C;
    for (int64_t c = 0; c < C; ++c) o[c] = e[c] + p[c];
  }
}

void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* inp, int64_t B,
                      int64_t T, int64_t C) {
  const int64_t block = 32;
  const int64_t nblocks = (C + block - 1) / block;
#pragma omp parallel for schedule(static)
  for (int64_t bi = 0; bi < nblocks; ++bi) {
    const int64_t c0 = bi * block, c1 = std::min(C, c0 + block);
    for (int64_t i = 0; i < B * T; ++i) {
      const float* d = dout + i * C;
      float* e = dwte + static_cast<int64_t>(inp[i]) * C;
      float* p = dwpe + (i % T) * C;
      for (int64_t c = c0; c < c1; ++c) {
        e[c] += d[c];
        p[c] += d[c];
      }
    }
  }
}

}  // namespace meshtrain::cpu::MT_ISA_NS

namespace meshtrain::cpu {

#if MT_ISA_BASELINE
// The public entry points: the variant for active_isa() (core/isa_dispatch.h).
MT_ISA_DECLARE(void encoder_forward(float* out, const int32_t* inp, const float* wte, const float* wpe, int64_t B, int64_t T, int64_t C))
MT_ISA_DECLARE(void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* inp, int64_t B, int64_t T, int64_t C))
void encoder_forward(float* out, const int32_t* inp, const float* wte, const float* wpe, int64_t B, int64_t T, int64_t C) {
  MT_ISA_PICK(encoder_forward)(out, inp, wte, wpe, B, T, C);
}
void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* inp, int64_t B, int64_t T, int64_t C) {
  MT_ISA_PICK(encoder_backward)(dwte, dwpe, dout, inp, B, T, C);
}
#endif
}  // namespace meshtrain::cpu
