// The seam between a frozen model and trainable additions to its linear
// layers (LoRA, nn/lora_model.h): a frozen model (Model::freeze) calls these
// around every GEMM whose matrix is adaptable, so a family supports LoRA
// with two calls in its linear-layer helpers and knows nothing else of it.
#pragma once
#include <cstdint>

#include "meshtrain/kernels/cpu/gemm_bf16.h"

namespace meshtrain {

// A GEMM's input as the model holds it: f32, or under mixed precision
// possibly only its 16-bit copy.
struct AdapterInput {
  const float* f = nullptr;     // null: only `h` exists
  const uint16_t* h = nullptr;  // 16-bit values in `format`
  HalfFormat format = HalfFormat::BF16;
};

class LinearAdapters {
 public:
  virtual ~LinearAdapters() = default;
  // After the frozen GEMM out (N, OC) = inp (N, K) W^T (plus any bias or
  // residual) with W the OC x K matrix at flat element `w_offset` of the
  // frozen model (possibly several adjacent parameters, e.g. q|k|v): adds
  // the adapters' terms of those parameters to `out`.
  virtual void forward(int64_t w_offset, float* out, AdapterInput inp, int64_t N, int64_t K,
                       int64_t OC) = 0;
  // In that GEMM's backward, after the frozen input gradient: accumulates the
  // adapters' parameter gradients from dout (N, OC) and adds their input
  // gradient into dinp (N, K; null: not needed).
  virtual void backward(int64_t w_offset, float* dinp, const float* dout, AdapterInput inp,
                        int64_t N, int64_t K, int64_t OC) = 0;
};

}  // namespace meshtrain
