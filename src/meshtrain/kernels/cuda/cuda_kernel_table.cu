#include "meshtrain/kernels/cuda/cuda_kernel_table.h"

#include "meshtrain/kernels/cuda/activations.h"
#include "meshtrain/kernels/cuda/attention.h"
#include "meshtrain/kernels/cuda/elementwise.h"
#include "meshtrain/kernels/cuda/embedding.h"
#include "meshtrain/kernels/cuda/kv_heads.h"
#include "meshtrain/kernels/cuda/matmul.h"
#include "meshtrain/kernels/cuda/norms.h"
#include "meshtrain/kernels/cuda/rope.h"
#include "meshtrain/kernels/cuda/softmax_cross_entropy.h"
#include "meshtrain/kernels/cuda/vocab_shard_loss.h"

namespace meshtrain {

namespace {
// In KernelTable's field order.
const KernelTable kCuda{
    Device::cuda(0),
    &cuda::matmul_forward,
    &cuda::matmul_backward,
    &cuda::matmul_forward_half,
    &cuda::matmul_backward_half,
    &cuda::matmul_backward_weight_half,
    &cuda::sgemm,
    &cuda::layernorm_forward,
    &cuda::layernorm_backward,
    &cuda::rmsnorm_forward,
    &cuda::rmsnorm_backward,
    &cuda::gelu_forward,
    &cuda::gelu_backward,
    &cuda::swiglu_forward,
    &cuda::swiglu_backward,
    &cuda::attention_forward,
    &cuda::attention_backward,
    &cuda::attention_forward_half,
    &cuda::attention_backward_half,
    &cuda::rope_forward,
    &cuda::rope_backward,
    &cuda::encoder_forward,
    &cuda::encoder_backward,
    &cuda::embedding_lookup,
    &cuda::embedding_accumulate,
    &cuda::add_periodic_rows,
    &cuda::sum_periodic_rows,
    &cuda::softmax_cross_entropy_forward,
    &cuda::softmax_cross_entropy_backward,
    &cuda::copy,
    &cuda::add_inplace,
    &cuda::sum_squares,
    &cuda::to_half,
    &cuda::from_half,
    &cuda::adamw_step,
    &cuda::expand_kv_heads,
    &cuda::fold_kv_heads,
    &cuda::vocab_shard_row_max,
    &cuda::vocab_shard_sum_exp,
    &cuda::vocab_shard_losses,
    &cuda::vocab_shard_backward,
    &cuda::dgemm,
    &cuda::gemm_half,
    &cuda::sgemm_strided_batched,
    &cuda::copy_2d,
};
}  // namespace

const KernelTable& cuda_kernel_table() { return kCuda; }

}  // namespace meshtrain
