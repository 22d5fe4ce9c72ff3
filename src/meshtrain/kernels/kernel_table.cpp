#include "meshtrain/kernels/kernel_table.h"

#include <type_traits>

#include "meshtrain/core/error.h"
#include "meshtrain/kernels/guarded_device.h"
#include "meshtrain/kernels/cpu/adamw.h"
#include "meshtrain/kernels/cpu/lamb.h"
#include "meshtrain/kernels/cpu/sgd.h"
#include "meshtrain/kernels/cpu/attention.h"
#include "meshtrain/kernels/cpu/batchnorm.h"
#include "meshtrain/kernels/cpu/conv2d.h"
#include "meshtrain/kernels/cpu/convert.h"
#include "meshtrain/kernels/cpu/elementwise.h"
#include "meshtrain/kernels/cpu/encoder.h"
#include "meshtrain/kernels/cpu/gelu.h"
#include "meshtrain/kernels/cpu/gemm_general.h"
#include "meshtrain/kernels/cpu/kv_heads.h"
#include "meshtrain/kernels/cpu/layernorm.h"
#include "meshtrain/kernels/cpu/matmul.h"
#include "meshtrain/kernels/cpu/matmul_half.h"
#include "meshtrain/kernels/cpu/pooling.h"
#include "meshtrain/kernels/cpu/reduce.h"
#include "meshtrain/kernels/cpu/relu.h"
#include "meshtrain/kernels/cpu/rmsnorm.h"
#include "meshtrain/kernels/cpu/rope.h"
#include "meshtrain/kernels/cpu/rows.h"
#include "meshtrain/kernels/cpu/softmax_cross_entropy.h"
#include "meshtrain/kernels/cpu/swiglu.h"
#include "meshtrain/kernels/cpu/topk.h"
#include "meshtrain/kernels/cpu/vocab_shard_loss.h"
#include "meshtrain/kernels/cuda_build.h"
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
// Every pointer a guarded op is given must be device memory (a GPU kernel
// could not read the host's); rope's angle table too.
template <typename T>
void check_on_device(const T& arg) {
  if constexpr (std::is_pointer_v<T>) {
    if (arg) MT_CHECK(on_guarded_device(arg), "a kernel on the guarded device was given host "
                      "memory ({}): copy it to the device first", static_cast<const void*>(arg));
  } else if constexpr (std::is_same_v<T, RopeView>) {
    check_on_device(arg.cos);
    check_on_device(arg.sin);
  }
}

// The guarded device's entry: the CPU function with the device's memory
// opened to the host while it runs (kernels/guarded_device.h).
template <auto F>
struct OnGuarded;
template <typename R, typename... A, R (*F)(A...)>
struct OnGuarded<F> {
  static R call(Stream, A... a) {
    (check_on_device(a), ...);
    GuardedAccess open;
    return F(a...);
  }
};

// The CPU kernels as a table, each entry wrapped by Wrap.
template <template <auto> class Wrap>
constexpr KernelTable cpu_kernels(Device device) {
  return KernelTable{
      device,
      &Wrap<&cpu::matmul_forward>::call,
      &Wrap<&cpu::matmul_backward>::call,
      &Wrap<&cpu::matmul_forward_half>::call,
      &Wrap<&cpu::matmul_backward_half>::call,
      &Wrap<&cpu::matmul_backward_weight_half>::call,
      &Wrap<&cpu::sgemm>::call,
      &Wrap<&cpu::layernorm_forward>::call,
      &Wrap<&cpu::layernorm_backward>::call,
      &Wrap<&cpu::rmsnorm_forward>::call,
      &Wrap<&cpu::rmsnorm_backward>::call,
      &Wrap<&cpu::gelu_forward>::call,
      &Wrap<&cpu::gelu_backward>::call,
      &Wrap<&cpu::swiglu_forward>::call,
      &Wrap<&cpu::swiglu_backward>::call,
      &Wrap<&cpu::attention_forward>::call,
      &Wrap<&cpu::attention_backward>::call,
      &Wrap<&cpu::attention_forward_half>::call,
      &Wrap<&cpu::attention_backward_half>::call,
      &Wrap<&cpu::rope_forward>::call,
      &Wrap<&cpu::rope_backward>::call,
      &Wrap<&cpu::encoder_forward>::call,
      &Wrap<&cpu::encoder_backward>::call,
      &Wrap<&cpu::embedding_lookup>::call,
      &Wrap<&cpu::embedding_accumulate>::call,
      &Wrap<&cpu::add_periodic_rows>::call,
      &Wrap<&cpu::sum_periodic_rows>::call,
      &Wrap<&cpu::softmax_cross_entropy_forward>::call,
      &Wrap<&cpu::softmax_cross_entropy_backward>::call,
      &Wrap<&cpu::copy>::call,
      &Wrap<&cpu::add_inplace>::call,
      &Wrap<&cpu::sum_squares>::call,
      &Wrap<&cpu::to_half>::call,
      &Wrap<&cpu::from_half>::call,
      &Wrap<&cpu::adamw_step>::call,
      &Wrap<&cpu::sgd_step>::call,
      &Wrap<&cpu::lamb_moments>::call,
      &Wrap<&cpu::lamb_apply>::call,
      &Wrap<&cpu::expand_kv_heads>::call,
      &Wrap<&cpu::fold_kv_heads>::call,
      &Wrap<&cpu::vocab_shard_row_max>::call,
      &Wrap<&cpu::vocab_shard_sum_exp>::call,
      &Wrap<&cpu::vocab_shard_losses>::call,
      &Wrap<&cpu::vocab_shard_backward>::call,
      &Wrap<&cpu::dgemm>::call,
      &Wrap<&cpu::gemm_half_general>::call,
      &Wrap<&cpu::sgemm_strided_batched>::call,
      &Wrap<&cpu::copy_2d>::call,
      &Wrap<&cpu::conv2d_forward>::call,
      &Wrap<&cpu::conv2d_backward_data>::call,
      &Wrap<&cpu::conv2d_backward_weights>::call,
      &Wrap<&cpu::conv2d_forward_half>::call,
      &Wrap<&cpu::conv2d_backward_data_half>::call,
      &Wrap<&cpu::conv2d_backward_weights_half>::call,
      &Wrap<&cpu::batchnorm_forward_training>::call,
      &Wrap<&cpu::batchnorm_forward_inference>::call,
      &Wrap<&cpu::batchnorm_backward>::call,
      &Wrap<&cpu::batchnorm_partial_sums>::call,
      &Wrap<&cpu::batchnorm_stats>::call,
      &Wrap<&cpu::batchnorm_normalize>::call,
      &Wrap<&cpu::batchnorm_update_running>::call,
      &Wrap<&cpu::batchnorm_backward_partial_sums>::call,
      &Wrap<&cpu::batchnorm_backward_params>::call,
      &Wrap<&cpu::batchnorm_backward_input>::call,
      &Wrap<&cpu::relu_forward>::call,
      &Wrap<&cpu::relu_backward>::call,
      &Wrap<&cpu::max_pool2d_forward>::call,
      &Wrap<&cpu::max_pool2d_backward>::call,
      &Wrap<&cpu::avg_pool2d_forward>::call,
      &Wrap<&cpu::avg_pool2d_backward>::call,
      &Wrap<&cpu::global_avg_pool_forward>::call,
      &Wrap<&cpu::global_avg_pool_backward>::call,
      &Wrap<&cpu::topk_correct>::call,
  };
}

const KernelTable kCpu = cpu_kernels<OnCpu>(Device::cpu());
const KernelTable kGuarded = cpu_kernels<OnGuarded>(Device::guarded());
// Installs the guarded test device's runtime when the program starts.
[[maybe_unused]] const bool guarded_installed = register_guarded_device();
#if MESHTRAIN_HAVE_CUDA
// Installs the CUDA runtime when the program starts; referencing it here also
// keeps the backend's objects in every binary that uses kernels.
[[maybe_unused]] const bool cuda_runtime_installed = register_cuda_runtime();
#endif
}  // namespace

const KernelTable& guarded_kernel_table() { return kGuarded; }

bool cuda_backend_built() { return MESHTRAIN_HAVE_CUDA != 0; }
std::string cuda_backend_archs() { return MESHTRAIN_CUDA_ARCHS; }

const KernelTable& kernels_for(Device device) {
  if (device.is_cpu()) return kCpu;
  if (device.type == DeviceType::Guarded) return kGuarded;
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
