#include "meshtrain/kernels/cuda/cuda_kernel_table.h"

#include "meshtrain/kernels/cuda/activations.h"
#include "meshtrain/kernels/cuda/attention.h"
#include "meshtrain/kernels/cuda/elementwise.h"
#include "meshtrain/kernels/cuda/embedding.h"
#include "meshtrain/kernels/cuda/kv_heads.h"
#include "meshtrain/kernels/cuda/matmul.h"
#include "meshtrain/kernels/cuda/not_yet.h"
#include "meshtrain/kernels/cuda/norms.h"
#include "meshtrain/kernels/cuda/rope.h"
#include "meshtrain/kernels/cuda/softmax_cross_entropy.h"
#include "meshtrain/kernels/cuda/vocab_shard_loss.h"

namespace meshtrain {

namespace {
// The image models' ops, not here yet (cuda/not_yet.h): their names.
constexpr char k_conv2d_forward[] = "conv2d_forward";
constexpr char k_conv2d_backward_data[] = "conv2d_backward_data";
constexpr char k_conv2d_backward_weights[] = "conv2d_backward_weights";
constexpr char k_conv2d_forward_half[] = "conv2d_forward_half";
constexpr char k_conv2d_backward_data_half[] = "conv2d_backward_data_half";
constexpr char k_conv2d_backward_weights_half[] = "conv2d_backward_weights_half";
constexpr char k_batchnorm_forward_training[] = "batchnorm_forward_training";
constexpr char k_batchnorm_forward_inference[] = "batchnorm_forward_inference";
constexpr char k_batchnorm_backward[] = "batchnorm_backward";
constexpr char k_batchnorm_partial_sums[] = "batchnorm_partial_sums";
constexpr char k_batchnorm_stats[] = "batchnorm_stats";
constexpr char k_batchnorm_normalize[] = "batchnorm_normalize";
constexpr char k_batchnorm_update_running[] = "batchnorm_update_running";
constexpr char k_batchnorm_backward_partial_sums[] = "batchnorm_backward_partial_sums";
constexpr char k_batchnorm_backward_params[] = "batchnorm_backward_params";
constexpr char k_batchnorm_backward_input[] = "batchnorm_backward_input";
constexpr char k_relu_forward[] = "relu_forward";
constexpr char k_relu_backward[] = "relu_backward";
constexpr char k_max_pool2d_forward[] = "max_pool2d_forward";
constexpr char k_max_pool2d_backward[] = "max_pool2d_backward";
constexpr char k_avg_pool2d_forward[] = "avg_pool2d_forward";
constexpr char k_avg_pool2d_backward[] = "avg_pool2d_backward";
constexpr char k_global_avg_pool_forward[] = "global_avg_pool_forward";
constexpr char k_global_avg_pool_backward[] = "global_avg_pool_backward";
constexpr char k_topk_correct[] = "topk_correct";
#define MT_NOT_YET(op) &cuda::NotYet<decltype(KernelTable::op)>::call<k_##op>

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
    &cuda::sgd_step,
    &cuda::lamb_moments,
    &cuda::lamb_apply,
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
    MT_NOT_YET(conv2d_forward),
    MT_NOT_YET(conv2d_backward_data),
    MT_NOT_YET(conv2d_backward_weights),
    MT_NOT_YET(conv2d_forward_half),
    MT_NOT_YET(conv2d_backward_data_half),
    MT_NOT_YET(conv2d_backward_weights_half),
    MT_NOT_YET(batchnorm_forward_training),
    MT_NOT_YET(batchnorm_forward_inference),
    MT_NOT_YET(batchnorm_backward),
    MT_NOT_YET(batchnorm_partial_sums),
    MT_NOT_YET(batchnorm_stats),
    MT_NOT_YET(batchnorm_normalize),
    MT_NOT_YET(batchnorm_update_running),
    MT_NOT_YET(batchnorm_backward_partial_sums),
    MT_NOT_YET(batchnorm_backward_params),
    MT_NOT_YET(batchnorm_backward_input),
    MT_NOT_YET(relu_forward),
    MT_NOT_YET(relu_backward),
    MT_NOT_YET(max_pool2d_forward),
    MT_NOT_YET(max_pool2d_backward),
    MT_NOT_YET(avg_pool2d_forward),
    MT_NOT_YET(avg_pool2d_backward),
    MT_NOT_YET(global_avg_pool_forward),
    MT_NOT_YET(global_avg_pool_backward),
    MT_NOT_YET(topk_correct),
};
#undef MT_NOT_YET
}  // namespace

const KernelTable& cuda_kernel_table() { return kCuda; }

}  // namespace meshtrain
