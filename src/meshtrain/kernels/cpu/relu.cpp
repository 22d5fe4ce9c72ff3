#include "meshtrain/kernels/cpu/relu.h"

namespace meshtrain::cpu {

namespace {
constexpr int64_t kGrain = 16384;  // below this a thread team costs more than the loop
}

void relu_forward(float* out, const float* inp, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > kGrain)
  for (int64_t i = 0; i < n; ++i) out[i] = inp[i] > 0.0f ? inp[i] : (inp[i] != inp[i] ? inp[i] : 0.0f);
}

void relu_backward(float* dinp, const float* dout, const float* out, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > kGrain)
  for (int64_t i = 0; i < n; ++i) {
    // dout is loaded either way: a select the loop vectorizes, not a branch
    // per element (random signs mispredict half of them).
    const float d = dout[i];
    dinp[i] = out[i] > 0.0f ? d : 0.0f;
  }
}

}  // namespace meshtrain::cpu
