// The scalars of one step of the momentum optimizers (SGD, LARS) and of
// LAMB, as every device's kernel takes them (AdamW's: adamw_hyper.h).
#pragma once
#include <cstdint>

namespace meshtrain {

// SGD with momentum, PyTorch's form, and LARS on top of it:
//   g = (grad * grad_scale + weight_decay * param) * trust
//   buf = first ? g : momentum * buf + (1 - dampening) * g   (momentum > 0)
//   d = nesterov ? g + momentum * buf : buf                   (momentum = 0: d = g)
//   param -= lr * d
// trust is 1 for SGD and a layer's trust ratio for LARS (optim/lars.h).
struct SgdHyper {
  float lr = 0.1f;
  float momentum = 0.9f;
  float dampening = 0.0f;
  float weight_decay = 0.0f;
  float grad_scale = 1.0f;  // multiply gradients by this first (clip coefficient)
  float trust = 1.0f;
  bool nesterov = false;
  bool first = false;  // the buffer starts as this step's g (PyTorch's first step)
};

// LAMB (You et al. 2020) in two passes over a layer: lamb_moments updates
//   m = beta1 m + (1 - beta1) g,  v = beta2 v + (1 - beta2) g^2   (g = grad * grad_scale)
// and returns the sum of squares of the update
//   u = mhat / (sqrt(vhat) + eps) + weight_decay * param
// (mhat, vhat bias-corrected at `step` when bias_correction); lamb_apply
// recomputes u from the same m, v, param and writes param -= step_size * u,
// step_size = lr * the layer's trust ratio (optim/lamb.h).
struct LambHyper {
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-6f;
  float weight_decay = 0.0f;
  float grad_scale = 1.0f;
  int64_t step = 1;  // 1-based
  bool bias_correction = true;
};

}  // namespace meshtrain
