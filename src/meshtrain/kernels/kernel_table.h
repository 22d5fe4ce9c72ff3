// The kernel seam: the ops a model, the optimizer and the precision
// conversions call, as one table per device. A model takes the table of the
// device its buffers live on (`kernels_for(tensor.device())`) and calls
// `k.matmul_forward(...)`; a CUDA backend adds a second table
// (kernels/cuda/, same signatures, device pointers) instead of editing the
// models. The CPU table points at kernels/cpu/ directly: no wrapper, no
// slowdown (one indirect call per op). Signatures follow llm.c's launchers:
// outputs first, shapes last; parameter gradients accumulate (+=),
// activation gradients are overwritten unless the op says otherwise.
#pragma once
#include "meshtrain/core/device.h"
#include "meshtrain/kernels/cpu/adamw.h"
#include "meshtrain/kernels/cpu/attention.h"
#include "meshtrain/kernels/cpu/convert.h"
#include "meshtrain/kernels/cpu/elementwise.h"
#include "meshtrain/kernels/cpu/encoder.h"
#include "meshtrain/kernels/cpu/gelu.h"
#include "meshtrain/kernels/cpu/layernorm.h"
#include "meshtrain/kernels/cpu/matmul.h"
#include "meshtrain/kernels/cpu/matmul_half.h"
#include "meshtrain/kernels/cpu/rmsnorm.h"
#include "meshtrain/kernels/cpu/rope.h"
#include "meshtrain/kernels/cpu/softmax_cross_entropy.h"
#include "meshtrain/kernels/cpu/swiglu.h"

namespace meshtrain {

struct KernelTable {
  Device device;
  // Linear layers: f32, and 16-bit operands with f32 accumulation.
  decltype(&cpu::matmul_forward) matmul_forward;
  decltype(&cpu::matmul_backward) matmul_backward;
  decltype(&cpu::matmul_forward_half) matmul_forward_half;
  decltype(&cpu::matmul_backward_half) matmul_backward_half;
  decltype(&cpu::matmul_backward_weight_half) matmul_backward_weight_half;
  // A general strided GEMM (small products: LoRA's adapters).
  decltype(&cpu::sgemm) sgemm;
  // Normalization and activations.
  decltype(&cpu::layernorm_forward) layernorm_forward;
  decltype(&cpu::layernorm_backward) layernorm_backward;
  decltype(&cpu::rmsnorm_forward) rmsnorm_forward;
  decltype(&cpu::rmsnorm_backward) rmsnorm_backward;
  decltype(&cpu::gelu_forward) gelu_forward;
  decltype(&cpu::gelu_backward) gelu_backward;
  decltype(&cpu::swiglu_forward) swiglu_forward;
  decltype(&cpu::swiglu_backward) swiglu_backward;
  // Attention, positions, embeddings, loss.
  decltype(&cpu::attention_forward) attention_forward;
  decltype(&cpu::attention_backward) attention_backward;
  decltype(&cpu::rope_forward) rope_forward;
  decltype(&cpu::rope_backward) rope_backward;
  decltype(&cpu::encoder_forward) encoder_forward;
  decltype(&cpu::encoder_backward) encoder_backward;
  decltype(&cpu::softmax_cross_entropy_forward) softmax_cross_entropy_forward;
  decltype(&cpu::softmax_cross_entropy_backward) softmax_cross_entropy_backward;
  // Elementwise, precision conversions, the optimizer step.
  decltype(&cpu::copy) copy;
  decltype(&cpu::add_inplace) add_inplace;
  decltype(&cpu::to_half) to_half;
  decltype(&cpu::from_half) from_half;
  decltype(&cpu::adamw_step) adamw_step;
};

// The table for `device`; an Error for a device this build has no kernels for.
const KernelTable& kernels_for(Device device);

}  // namespace meshtrain
