#include "meshtrain/kernels/kernel_table.h"

#include "meshtrain/core/error.h"
#include "meshtrain/kernels/cpu/adamw.h"
#include "meshtrain/kernels/cpu/attention.h"
#include "meshtrain/kernels/cpu/convert.h"
#include "meshtrain/kernels/cpu/elementwise.h"
#include "meshtrain/kernels/cpu/encoder.h"
#include "meshtrain/kernels/cpu/gelu.h"
#include "meshtrain/kernels/cpu/kv_heads.h"
#include "meshtrain/kernels/cpu/layernorm.h"
#include "meshtrain/kernels/cpu/matmul.h"
#include "meshtrain/kernels/cpu/matmul_half.h"
#include "meshtrain/kernels/cpu/reduce.h"
#include "meshtrain/kernels/cpu/rmsnorm.h"
#include "meshtrain/kernels/cpu/rope.h"
#include "meshtrain/kernels/cpu/rows.h"
#include "meshtrain/kernels/cpu/softmax_cross_entropy.h"
#include "meshtrain/kernels/cpu/swiglu.h"
#include "meshtrain/kernels/cpu/vocab_shard_loss.h"
#if MESHTRAIN_HAVE_CUDA
#include "meshtrain/kernels/cuda/cuda_kernel_table.h"
#include "meshtrain/kernels/cuda/device_runtime_cuda.h"
#endif

namespace meshtrain {

namespace {
// A CPU op has finished when its call returns, so its table entry is the CPU
// function behind a stream it ignores (inlined: one indirect call per op).
template <auto F>
struct OnCpu;
template <typename R, typename... A, R (*F)(A...)>
struct OnCpu<F> {
  static R call(Stream, A... a) { return F(a...); }
};
template <auto F>
constexpr auto cpu_op = &OnCpu<F>::call;

const KernelTable kCpu{
    Device::cpu(),
    cpu_op<&cpu::matmul_forward>,
    cpu_op<&cpu::matmul_backward>,
    cpu_op<&cpu::matmul_forward_half>,
    cpu_op<&cpu::matmul_backward_half>,
    cpu_op<&cpu::matmul_backward_weight_half>,
    cpu_op<&cpu::sgemm>,
    cpu_op<&cpu::layernorm_forward>,
    cpu_op<&cpu::layernorm_backward>,
    cpu_op<&cpu::rmsnorm_forward>,
    cpu_op<&cpu::rmsnorm_backward>,
    cpu_op<&cpu::gelu_forward>,
    cpu_op<&cpu::gelu_backward>,
    cpu_op<&cpu::swiglu_forward>,
    cpu_op<&cpu::swiglu_backward>,
    cpu_op<&cpu::attention_forward>,
    cpu_op<&cpu::attention_backward>,
    cpu_op<&cpu::rope_forward>,
    cpu_op<&cpu::rope_backward>,
    cpu_op<&cpu::encoder_forward>,
    cpu_op<&cpu::encoder_backward>,
    cpu_op<&cpu::embedding_lookup>,
    cpu_op<&cpu::embedding_accumulate>,
    cpu_op<&cpu::add_periodic_rows>,
    cpu_op<&cpu::sum_periodic_rows>,
    cpu_op<&cpu::softmax_cross_entropy_forward>,
    cpu_op<&cpu::softmax_cross_entropy_backward>,
    cpu_op<&cpu::copy>,
    cpu_op<&cpu::add_inplace>,
    cpu_op<&cpu::sum_squares>,
    cpu_op<&cpu::to_half>,
    cpu_op<&cpu::from_half>,
    cpu_op<&cpu::adamw_step>,
    cpu_op<&cpu::expand_kv_heads>,
    cpu_op<&cpu::fold_kv_heads>,
    cpu_op<&cpu::vocab_shard_row_max>,
    cpu_op<&cpu::vocab_shard_sum_exp>,
    cpu_op<&cpu::vocab_shard_losses>,
    cpu_op<&cpu::vocab_shard_backward>,
};
#if MESHTRAIN_HAVE_CUDA
// Installs the CUDA runtime when the program starts; referencing it here also
// keeps the backend's objects in every binary that uses kernels.
[[maybe_unused]] const bool cuda_runtime_installed = register_cuda_runtime();
#endif
}  // namespace

const KernelTable& kernels_for(Device device) {
  if (device.is_cpu()) return kCpu;
#if MESHTRAIN_HAVE_CUDA
  MT_CHECK(device.index == 0, "kernels for {}: one GPU per process (cuda:0 after "
           "CUDA_VISIBLE_DEVICES picks it)", device.str());
  return cuda_kernel_table();
#else
  fail("no kernels for device {} in this build (CPU only; configure with "
          "-DMESHTRAIN_CUDA=ON for the CUDA backend)", device.str());
#endif
}

}  // namespace meshtrain
