// Fused AdamW step over a contiguous range: decoupled weight decay, bias
// correction, gradient pre-scaling (for clipping/unscaling) in one pass.
#pragma once
#include <cstdint>

namespace meshtrain::cpu {

struct AdamWHyper {
  float lr = 6e-4f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  float grad_scale = 1.0f;  // multiply gradients by this first (clip coefficient)
  int64_t step = 1;         // 1-based, for bias correction
};

// param -= lr * (mhat / (sqrt(vhat) + eps) + weight_decay * param)
void adamw_step(float* param, const float* grad, float* m, float* v, int64_t n,
                const AdamWHyper& h);

}  // namespace meshtrain::cpu
