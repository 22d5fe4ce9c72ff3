#include "meshtrain/kernels/kernel_table.h"

#include "meshtrain/core/error.h"

namespace meshtrain {

namespace {
const KernelTable kCpu{
    Device::cpu(),
    &cpu::matmul_forward,
    &cpu::matmul_backward,
    &cpu::matmul_forward_half,
    &cpu::matmul_backward_half,
    &cpu::matmul_backward_weight_half,
    &cpu::sgemm,
    &cpu::layernorm_forward,
    &cpu::layernorm_backward,
    &cpu::rmsnorm_forward,
    &cpu::rmsnorm_backward,
    &cpu::gelu_forward,
    &cpu::gelu_backward,
    &cpu::swiglu_forward,
    &cpu::swiglu_backward,
    &cpu::attention_forward,
    &cpu::attention_backward,
    &cpu::rope_forward,
    &cpu::rope_backward,
    &cpu::encoder_forward,
    &cpu::encoder_backward,
    &cpu::softmax_cross_entropy_forward,
    &cpu::softmax_cross_entropy_backward,
    &cpu::copy,
    &cpu::add_inplace,
    &cpu::to_half,
    &cpu::from_half,
    &cpu::adamw_step,
};
}  // namespace

const KernelTable& kernels_for(Device device) {
  MT_CHECK(device.is_cpu(), "no kernels for device {} in this build (CPU only; the CUDA backend "
           "adds its table in kernels/cuda/)", device.str());
  return kCpu;
}

}  // namespace meshtrain
