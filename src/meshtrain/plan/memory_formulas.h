// Closed-form memory per GPU, the published formulas the planner and its
// tests share:
//  - model states under ZeRO (Rajbhandari et al. 2020, Sec. 5 / Table 1):
//    for Psi parameters on N data-parallel ranks with p, g bytes per
//    parameter and gradient and k bytes of optimizer state,
//      stage 0: (p + g + k) Psi        stage 1: (p + g) Psi + k Psi / N
//      stage 2: p Psi + (g + k) Psi/N  stage 3: (p + g + k) Psi / N
//    The paper's mixed-precision Adam is p = g = 2, k = 12; meshtrain keeps
//    f32 gradients (g = 4) and counts the f32 master with the optimizer state
//    (train/memory_report.h).
//  - activations per transformer layer under tensor parallelism t, sequence
//    parallelism and recompute (Korthikanti et al. 2022, Table 2), with s the
//    sequence, b the micro-batch, h hidden, a heads, 16-bit activations:
//      none            s b h (34 + 5 a s / h)
//      tp              s b h (10 + 24 / t + 5 a s / (h t))
//      tp + sp         s b h (34 / t + 5 a s / (h t))
//      tp + selective  s b h (10 + 24 / t)
//      tp + sp + sel.  s b h (34 / t)
//      full recompute  s b h 2 (the layer's input only)
#pragma once
#include <cstdint>

namespace meshtrain::plan {

struct StateBytes {
  double p = 2, g = 2, k = 12;  // the ZeRO paper's mixed-precision Adam
};
// meshtrain's mixed precision: bf16 copy, f32 gradients, f32 master + Adam m, v.
constexpr StateBytes kMeshtrainBf16{2, 4, 12};

double zero_model_state_bytes(double psi, int64_t dp, int stage, StateBytes b = {});

enum class RecomputePolicy { None = 0, Selective = 1, Full = 2 };
const char* recompute_policy_name(RecomputePolicy r);

double activation_bytes_per_layer(double s, double b, double h, double a, int64_t t,
                                  bool sequence_parallel, RecomputePolicy recompute);

}  // namespace meshtrain::plan
